package replica

// The host's side of its mirrors (internal/replica/mirror): it makes one
// for a group it does not run at the first call that names the group
// (mirrorOf), keeps them by name, retires one that stays unused, and
// answers the calls a mirror makes of it (mirror.Host, through
// mirrorHost). A mirror reaches its host only through those calls; the
// host reaches a mirror through its methods: Group's, and New, Run,
// WatchIdle, Stop and the handover's (Retire, HandedOver, Handover).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/mirror"
	"github.com/fencelock/fencelock/transport"
)

// MirrorIdle is how long a mirror stays without use before it stops; a
// variable for tests only.
var MirrorIdle = time.Minute

// mirrorHost is the host as its mirrors see it (mirror.Host): the calls
// below, and no more.
type mirrorHost struct{ h *Host }

func (a mirrorHost) CallsReady() error { return a.h.callsReady() }
func (a mirrorHost) DialCall(ctx context.Context, addr string) (transport.CallConn, error) {
	return a.h.dialCall(ctx, addr)
}
func (a mirrorHost) TableVoters(name string, shard uint64) ([]uint64, bool) {
	return a.h.tableVoters(name, shard)
}
func (a mirrorHost) MemberAddr(group string, id uint64) (string, bool) {
	return a.h.memberAddr(group, id)
}
func (a mirrorHost) MembersRemote(ctx context.Context, name string, shard uint64, ask []uint64) (Membership, error) {
	return a.h.membersRemote(ctx, name, shard, ask)
}
func (a mirrorHost) Replaced(ctx context.Context, m *mirror.Mirror, err error) mirror.Group {
	if g := a.h.replaced(ctx, m, err); g != nil {
		return g
	}
	return nil
}
func (a mirrorHost) RetireIdle(m *mirror.Mirror) bool { return a.h.retireIdle(m) }
func (a mirrorHost) GoBackground(f func()) bool       { return a.h.goBackground(f) }

// callsReady says why this host cannot open a call connection now.
func (h *Host) callsReady() error {
	if h.calls == nil {
		return errors.New("the transport carries no calls between replicas")
	}
	if h.down.Load() {
		return errors.New("this host is cut off (a test's crash)")
	}
	return nil
}

// dialCall opens a call connection to the replica at addr.
func (h *Host) dialCall(ctx context.Context, addr string) (transport.CallConn, error) {
	return h.calls.DialCall(ctx, addr)
}

// tableVoters returns group name's voters as the group table last read
// here has them, if it has the group on shard.
func (h *Host) tableVoters(name string, shard uint64) ([]uint64, bool) {
	if v := h.table.Current(); v != nil {
		if e, ok := v.Find(name); ok && e.Shard == shard {
			return e.Voters, true
		}
	}
	return nil, false
}

// retireIdle stops idle mirror m unless it is in use again, the host is
// closing, or it is no longer the group's mirror; it reports whether it
// did. Close waits for the stop.
func (h *Host) retireIdle(m *mirror.Mirror) bool {
	h.setMu.Lock()
	defer h.setMu.Unlock()
	r := &m.Core
	if h.mirror(r.Name()) != m || !m.Idle() {
		return false
	}
	why := fmt.Errorf("%w: group %q: %w", ErrUnavailable, r.Name(), mirror.ErrIdle)
	r.Gone.Store(&why)
	if !h.goBackground(func() {
		m.Stop()
		m.Wait()
	}) {
		return false // closing: Close stops it
	}
	h.setMirror(r.Name(), nil)
	r.Logger().Debug("fencelock: mirror stopped, unused")
	return true
}

// newMirror makes the mirror of table entry e, whose Sink has seen the
// group's state up to delivered (the index the shard this host ran of it
// applied, or 0).
func (h *Host) newMirror(e namedGroup, voters []uint64, delivered uint64) *mirror.Mirror {
	cfg := mirror.Config{ReplicaID: h.cfg.ReplicaID, RTT: h.cfg.RTT, ProposalTimeout: h.cfg.ProposalTimeout,
		ElectionTicks: h.cfg.ElectionTicks, Logger: h.cfg.Logger, Idle: func() time.Duration { return MirrorIdle }}
	m := mirror.New(mirrorHost{h}, cfg, e.Name, e.shard(), h.sinks(e.Name), voters, delivered)
	h.mirrorsRunning.Add(1)
	m.Spawn(func() {
		defer h.mirrorsRunning.Add(-1)
		m.Run()
	})
	m.Spawn(m.WatchIdle)
	m.Logger().Info("fencelock: group reached through a replica that runs it (Placement own groups)", "voters", voters)
	return m
}

// mirror returns the mirror of group name, nil if there is none.
func (h *Host) mirror(name string) *mirror.Mirror {
	if p := h.mirrors.Load(); p != nil {
		return (*p)[name]
	}
	return nil
}

// Mirrors returns the mirrors this host has now, by name: the groups it
// reaches without running them (PlaceOwnGroups).
func (h *Host) Mirrors() []Group {
	ms := slices.SortedFunc(slices.Values(h.mirrorList()), func(a, b *mirror.Mirror) int { return cmp.Compare(a.Name(), b.Name()) })
	out := make([]Group, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// mirrorList returns the mirrors; the caller holds setMu.
func (h *Host) mirrorList() []*mirror.Mirror {
	if p := h.mirrors.Load(); p != nil {
		return slices.Collect(maps.Values(*p))
	}
	return nil
}

// setMirror publishes (r non-nil) or removes the mirror of group name;
// the caller holds setMu.
func (h *Host) setMirror(name string, r *mirror.Mirror) {
	out := map[string]*mirror.Mirror{}
	if p := h.mirrors.Load(); p != nil {
		out = maps.Clone(*p)
	}
	if r == nil {
		delete(out, name)
	} else {
		out[name] = r
	}
	h.mirrors.Store(&out)
}

// mirrorOf returns this host's mirror of table entry e, started if need
// be, or nil once the host closes.
func (h *Host) mirrorOf(e fsm.GroupEntry) Group {
	h.setMu.Lock()
	defer h.setMu.Unlock()
	if h.closing() {
		return nil
	}
	if m := h.mirror(e.Name); m != nil && m.ShardID() == e.Shard {
		return m
	}
	if r := h.running(e.Name); r != nil {
		return r
	}
	ng := namedGroup{Name: e.Name, Shard: e.Shard}
	m := h.newMirror(ng, e.Voters, 0)
	h.setMirror(e.Name, m)
	return m
}

// goBackground runs f on the host's background work unless it is closing.
func (h *Host) goBackground(f func()) bool {
	h.bgMu.Lock()
	defer h.bgMu.Unlock()
	if h.closing() {
		return false
	}
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		f()
	}()
	return true
}
