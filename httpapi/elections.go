package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servicehook"
	"github.com/fencelock/fencelock/lockapi"
)

// CampaignResponse answers a campaign.
// It is lockapi.CampaignResponse, which the Go client decodes too.
type CampaignResponse = lockapi.CampaignResponse

func electedResponse(l *fencelock.Leadership) CampaignResponse {
	var holder ID
	if s := l.Session(); s != nil {
		id, _ := s.IDIn(groupOf(l.Election()))
		holder = ID(id)
	}
	return CampaignResponse{Elected: true, Token: ID(l.Token()), Fence: l.Fence().String(), Value: l.Value(), HolderSession: holder}
}

// sessionCall decodes the common parts of a call on a lock or an election
// for a session: the name, the body, and the session (forwarding the call
// to the replica serving it, or adopting it: see lookup). ok false: the
// response was written.
func (s *Server) sessionCall(w http.ResponseWriter, r *http.Request, decode func([]byte) (ID, error)) (string, *session, bool) {
	name := r.PathValue("name")
	id, ok := decodeBody(w, r, validName(name), decode)
	if !ok {
		return "", nil, false
	}
	hs, fwd, err := s.lookup(w, r, id)
	if fwd {
		return "", nil, false
	}
	if err != nil {
		writeError(w, err)
		return "", nil, false
	}
	return name, hs, true
}

// sessionRequest is the body of a call for a session: it names the session.
type sessionRequest interface{ session() ID }

func (r AcquireRequest) session() ID  { return r.SessionID }
func (r ReleaseRequest) session() ID  { return r.SessionID }
func (r CampaignRequest) session() ID { return r.SessionID }
func (r ProclaimRequest) session() ID { return r.SessionID }
func (r ResignRequest) session() ID   { return r.SessionID }

// decodeCall is sessionCall with the body read by decode: it returns the
// request as well.
func decodeCall[T sessionRequest](s *Server, w http.ResponseWriter, r *http.Request, decode func([]byte) (T, error)) (T, string, *session, bool) {
	var req T
	name, hs, ok := s.sessionCall(w, r, func(b []byte) (ID, error) {
		var err error
		req, err = decode(b)
		return req.session(), err
	})
	return req, name, hs, ok
}

func (s *Server) campaign(w http.ResponseWriter, r *http.Request) {
	arrived := servicehook.Now(s.node) // before the session's lookup, which may adopt it
	req, name, hs, ok := decodeCall(s, w, r, DecodeCampaign)
	if !ok {
		return
	}
	s.request(w, r, hs, name, grantCall{
		election: true,
		wait:     req.Wait,
		try: func(ctx context.Context) (*fencelock.Lock, *fencelock.Leadership, error) {
			l, err := hs.s.TryCampaign(ctx, name, req.Value)
			return nil, l, err
		},
		start: func(ctx context.Context, position fencelock.AcquireOption) (*fencelock.Lock, *fencelock.Leadership, error) {
			l, err := hs.s.Campaign(ctx, name, req.Value, position)
			return nil, l, err
		},
		taken:   fencelock.ErrElectionTaken,
		refused: CampaignResponse{Elected: false},
		granted: func(wt *wait) any {
			resp := electedResponse(wt.lead)
			resp.LeaseMS = grantLease(hs.s, wt.lead, arrived)
			return resp
		},
		queued: func(pos int) any {
			return CampaignResponse{Elected: false, QueuePosition: pos, HolderSession: holderSession(hs, name)}
		},
	}, s.campaign)
}

// term returns the session's current term of name with token (one won
// here, or kept by an adoption), or a 409.
func term(hs *session, name string, token ID) (*fencelock.Leadership, error) {
	hs.mu.Lock()
	wt := hs.elections[name]
	hs.mu.Unlock()
	if wt == nil || !wt.isDone() || wt.lead == nil || wt.lead.Token() != uint64(token) {
		if wt = hs.held(name, true); wt == nil || wt.lead.Token() != uint64(token) {
			return nil, newError(http.StatusConflict, CodeNotLeader, "token "+token.String()+" is not the session's current term of this election")
		}
	}
	return wt.lead, nil
}

func (s *Server) proclaim(w http.ResponseWriter, r *http.Request) {
	req, name, hs, ok := decodeCall(s, w, r, DecodeProclaim)
	if !ok {
		return
	}
	l, err := term(hs, name, req.Token)
	if err == nil {
		ctx, cancel := s.callCtx(r)
		defer cancel()
		err = l.Proclaim(ctx, req.Value)
	}
	if s.retryLost(w, r, hs, err, s.proclaim) {
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, electedResponse(l))
}

func (s *Server) resign(w http.ResponseWriter, r *http.Request) {
	req, name, hs, ok := decodeCall(s, w, r, DecodeResign)
	if !ok {
		return
	}
	s.finish(w, r, hs, name, endCall{
		election: true,
		token:    req.Token,
		notHeld:  fencelock.ErrNotLeader,
		stale:    staleTerm,
		end:      func(ctx context.Context, wt *wait) error { return wt.lead.Resign(ctx) },
		answer:   map[string]bool{"resigned": true},
	}, s.resign)
}

func staleTerm(token ID) error {
	return newError(http.StatusConflict, CodeNotLeader, "token "+token.String()+" is not the session's current term of this election")
}

// LeaderJSON describes an election's leader.
// It is lockapi.LeaderJSON, which the Go client decodes too.
type LeaderJSON = lockapi.LeaderJSON

// CandidateJSON is a queued candidate.
// It is lockapi.CandidateJSON, which the Go client decodes too.
type CandidateJSON = lockapi.CandidateJSON

// ElectionJSON answers GET /v1/elections/{name}.
// It is lockapi.ElectionJSON, which the Go client decodes too.
type ElectionJSON = lockapi.ElectionJSON

func leaderJSON(li fencelock.LeaderInfo) *LeaderJSON {
	if li.Token == 0 {
		return nil
	}
	l := &LeaderJSON{SessionID: ID(li.SessionID), PartID: partID(groupOf(li.Election) != "", li.PartID), Name: li.SessionName, Value: li.Value, Token: ID(li.Token)}
	l.ElectedAt, l.LeadingForMS = stamp(li.ElectedAt, time.Now())
	return l
}

// ElectionSummary is one election in GET /v1/elections.
type ElectionSummary struct {
	Name       string      `json:"name"`
	Leader     *LeaderJSON `json:"leader"` // null without a leader
	Candidates int         `json:"candidates"`
}

// ElectionList answers GET /v1/elections.
type ElectionList struct {
	Elections []ElectionSummary `json:"elections"`
	More      bool              `json:"more"`
	Next      string            `json:"next,omitempty"` // the "after" of the next page
}

// listElections answers GET /v1/elections, paged as GET /v1/locks: prefix,
// after, limit.
func (s *Server) listElections(w http.ResponseWriter, r *http.Request) {
	opts, err := pageByName(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ask := func(ctx context.Context) (fencelock.ElectionPage, error) {
		return s.node.Elections(ctx, r.URL.Query().Get("prefix"), opts...)
	}
	reply(s, w, r, ask, func(page fencelock.ElectionPage) any {
		out := ElectionList{Elections: []ElectionSummary{}, More: page.More}
		for _, e := range page.Elections {
			out.Elections = append(out.Elections, ElectionSummary{Name: e.Election, Leader: leaderJSON(e.LeaderInfo),
				Candidates: e.Candidates})
		}
		if page.More && len(page.Elections) > 0 {
			out.Next = page.Elections[len(page.Elections)-1].Election
		}
		return out
	})
}

func (s *Server) getElection(w http.ResponseWriter, r *http.Request) {
	candidates := func(ctx context.Context, name string) (fencelock.Candidates, error) {
		return s.node.Candidates(ctx, name)
	}
	replyNamed(s, w, r, candidates, func(name string, c fencelock.Candidates) any {
		now := time.Now()
		out := ElectionJSON{Name: name, Leader: leaderJSON(c.Leader), Candidates: []CandidateJSON{}, Total: c.Total}
		for _, q := range c.Queue {
			cj := CandidateJSON{SessionID: ID(q.SessionID), PartID: partID(groupOf(name) != "", q.PartID), Name: q.Name, Place: q.Place, Value: q.Value, Replica: q.Replica}
			cj.QueuedAt, cj.WaitedMS = stamp(q.QueuedAt, now)
			out.Candidates = append(out.Candidates, cj)
		}
		return out
	})
}

// ObserveEvent is the data of one observe event.
// It is lockapi.ObserveEvent, which the Go client decodes too.
type ObserveEvent = lockapi.ObserveEvent

func (s *Server) observe(w http.ResponseWriter, r *http.Request) {
	first, prev := true, fencelock.LeaderInfo{}
	errOf := func(li fencelock.LeaderInfo) error { return li.Err }
	follow(s, w, r, s.node.Observe, errOf, func(st *stream, name string, li fencelock.LeaderInfo) {
		ev := ObserveEvent{Name: name, Leader: leaderJSON(li)}
		switch {
		case first:
			st.send("state", ev)
		case li.Token == 0:
			st.send("no_leader", ev)
		case li.Token != prev.Token:
			st.send("leader", ev)
		default:
			st.send("proclaimed", ev)
		}
		first, prev = false, li
	})
}
