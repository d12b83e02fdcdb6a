package fsm

// ElectionInfo describes one election.
type ElectionInfo struct {
	Name       string
	Led        bool   // it has a leader
	Token      uint64 // the leader's term token (epoch); 0 without a leader
	Session    uint64 // the leader's session; 0 without a leader
	Parent     uint64 // the leader's session's parent (Command.Parent); 0: none, unknown or no leader
	Seq        uint64 // the leader's request number
	Value      string // the leader's value
	Candidates int    // candidates queued behind the leader
	// SessionName is the leader's session's name ("" without a leader, or
	// if it was opened without one).
	SessionName string
	// ElectedAt is when the leader was elected: the At of the command
	// whose apply made the grant (see Holder.GrantedAt); 0: unknown.
	ElectedAt uint64
}

// Election describes the election called name; one nobody leads or
// campaigns in is reported without a leader.
func (st *State) Election(name string) ElectionInfo {
	e := st.elections.get(name)
	if e == nil {
		return ElectionInfo{Name: name}
	}
	return e.electionInfo()
}

func (e *lock) electionInfo() ElectionInfo {
	info := ElectionInfo{Name: e.name, Candidates: e.waiters()}
	if h := e.oldest(); h != nil {
		info.Led, info.Token, info.Session, info.Seq, info.Value = true, h.token, h.s.id, h.seq, e.value()
		info.SessionName, info.ElectedAt, info.Parent = h.s.name, h.at, h.s.parent
	}
	return info
}

// Leading reports the election, token and value of the leadership that
// request seq of session holds, if any.
func (st *State) Leading(session, seq uint64) (info ElectionInfo, ok bool) {
	s := st.sessions[session]
	if s == nil {
		return ElectionInfo{}, false
	}
	if h := s.holding(seq); h != nil && h.l.election {
		return st.Election(h.l.name), true
	}
	return ElectionInfo{}, false
}

// Campaigning reports whether request seq of session waits as a candidate.
func (st *State) Campaigning(session, seq uint64) bool {
	s := st.sessions[session]
	return s != nil && s.campaigns[seq] != nil
}

// Grants returns how many grants the group has made, of locks and of
// leaderships, since it began (since a snapshot of version 1, which did not
// count them, for a group restored from one). It changes exactly once per
// grant, so a test can assert that one change of leader cost one grant.
func (st *State) Grants() uint64 { return st.grants }

// ElectionCounts returns the number of elections that have a leader or
// candidates, and of queued candidates.
func (st *State) ElectionCounts() (elections, candidates int) {
	return st.elections.len(), st.campaigning
}

// Candidate is one queued candidate of an election.
type Candidate struct {
	Session, Seq, Owner uint64 // Owner: the replica its session lives on
	Parent              uint64 // its session's parent (Command.Parent); 0: none or unknown
	Value               string
	Name                string // its session's name
	Place               int    // its place in the queue: 1 leads next
	QueuedAt            uint64 // the At of its Campaign (see Holder.GrantedAt); 0: unknown
}

// Candidates returns up to limit of the election's queued candidates, in
// the order they will lead.
func (st *State) Candidates(name string, limit int) []Candidate {
	e := st.elections.get(name)
	if e == nil {
		return nil
	}
	out := make([]Candidate, 0, min(limit, e.waiters()))
	for w := range e.queued {
		if len(out) == limit {
			break
		}
		out = append(out, Candidate{Session: w.s.id, Seq: w.seq, Owner: w.s.owner, Parent: w.s.parent, Value: w.value, Name: w.s.name,
			Place: len(out) + 1, QueuedAt: w.at})
	}
	return out
}
