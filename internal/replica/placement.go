package replica

// Placement: which named groups a host runs a shard of. With PlaceEvery
// (the default, and every build before it was a choice) a host runs every
// group, as a non-voting replica where it does not vote (groups.go). With
// PlaceOwn it runs a group's shard only where it is one of the group's
// voters; a call naming another group goes through a mirror (package mirror) of
// the group fed by a replica that runs it (package serve). The default
// group runs everywhere either way.
//
// A host announces its placement in its Hello (peering.Hello.Place). A
// group's leader adds a host as a non-voting replica only if that host
// runs every group: it announced so, or it announced nothing (a build from
// before the choice). A host the leader has not heard from yet is asked,
// by opening a call connection (whose handshake carries its Hello), before
// it is added: a PlaceOwn host that were added would be a member that
// never runs, and removing it again would bar its ID from the group for
// good (Dragonboat never lets a removed replica ID back).

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/transport"
)

// Placement is a host's choice of the named groups it runs (the root's
// Config.Placement documents it).
type Placement uint8

const (
	PlaceEvery Placement = iota // every group: a non-voting replica where not a voter
	PlaceOwn                    // only the groups it votes in; the others through mirrors
)

// Valid reports whether p is one of the placements.
func (p Placement) Valid() bool { return p <= PlaceOwn }

func (p Placement) String() string {
	switch p {
	case PlaceEvery:
		return "every group"
	case PlaceOwn:
		return "own groups"
	}
	return fmt.Sprintf("placement %d", uint8(p))
}

// own reports whether this host runs only the groups it votes in.
func (h *Host) own() bool { return h.cfg.Placement == PlaceOwn }

// recordPlace keeps what replica id announced of its placement.
func (p *peers) recordPlace(id uint64, place string) { p.places.Store(id, place) }

// askTimeout bounds how long a group's leader waits to learn a host's
// placement before it adds the host as a non-voting replica.
const askTimeout = 2 * time.Second

// runsEveryGroup reports whether the host id at addr runs every group, so
// that a group's leader may add it as a non-voting replica: known from its
// Hello, or learnt by opening a call connection to it now. ok is false
// when it cannot be learnt yet (the host is unreachable): the leader asks
// again later.
func (h *Host) runsEveryGroup(ctx context.Context, id uint64, addr string) (every, ok bool) {
	if v, known := h.peers.places.Load(id); known {
		return v.(string) != peering.PlaceOwn, true
	}
	d := h.calls
	if d == nil {
		return true, true // a transport without calls: no PlaceOwn host can talk to this one
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	c, err := d.DialCall(ctx, addr)
	if err == nil {
		c.Close()
	}
	if v, known := h.peers.places.Load(id); known {
		return v.(string) != peering.PlaceOwn, true
	}
	return false, false
}

// callDialer is the call side of the host's transport, if it has one.
func callDialer(f any) transport.CallDialer {
	d, _ := f.(transport.CallDialer)
	return d
}
