// Package peering is what two replicas tell each other when they connect, so
// that a replica started with the wrong Members, the wrong ID or the wrong
// address is refused by its peers with a message naming the mistake, instead
// of joining the wrong group, splitting the group or crashing a peer; and
// which log and snapshot versions each reads, so that a group writes a new
// version only once every member reads it (the version gate, internal/fsm),
// and a replica that cannot read what its groups write is refused with the
// versions named.
//
// The transport carries a Hello each way when a connection opens; each side
// checks the other's with its Local and closes the connection if either
// refuses. The identity itself, and what a refusal says, are the replica's
// business (the root package); this package only defines and encodes them.
package peering

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lni/dragonboat/v4/config"
)

// Hello is what a replica says about itself.
type Hello struct {
	// Group is the group's identity, fixed when it bootstrapped; empty for
	// a replica that joined and has not learnt it yet.
	Group string `json:"g,omitempty"`
	// Replica is its replica ID, Addr the raft address its peers dial.
	Replica uint64 `json:"r"`
	Addr    string `json:"a"`
	// Members is the group's bootstrap membership as this replica has it,
	// so that a refusal can name the difference.
	Members map[uint64]string `json:"m,omitempty"`
	// GroupID is the ID the group's first leader chose (fsm.State.GroupID),
	// once this replica applied it: it tells apart two incarnations of a
	// group bootstrapped with the same members.
	GroupID uint64 `json:"id,omitempty"`
	// Groups are the named groups this replica runs. A named group's
	// identity is its name and the voters it was bootstrapped with: two
	// replicas that both run a group (the same name on the same shard)
	// must agree on it; a group only one side runs is not compared (the
	// group table, or a rolling restart, adds or removes it).
	Groups []GroupHello `json:"gs,omitempty"`
	// Dir is the random ID this replica's Dir got when the replica first
	// took part in its groups; 0 before that. A replica that lost its Dir
	// and starts empty under its old ID has another one.
	Dir uint64 `json:"d,omitempty"`
	// Dirs are the Dir IDs this replica has on record, by replica ID: its
	// peers' (and its own), so that what one replica saw reaches the others.
	Dirs map[uint64]uint64 `json:"ds,omitempty"`
	// Codec and Snapshot are the newest log entry and snapshot versions
	// this replica reads. 0 (absent) is a replica of a build from before
	// they were announced, which reads log version 8 and snapshot version 6
	// (fsm.Baseline); such a build ignores them in a peer's Hello, as JSON
	// decoding ignores fields it does not know.
	Codec    uint8 `json:"cv,omitempty"`
	Snapshot uint8 `json:"sv,omitempty"`
	// Place is how this replica places the named groups: PlaceOwn runs a
	// group only where it is one of the group's voters (a group's leader
	// must not add it as a non-voting replica); "" (absent, as from every
	// build before it was announced) runs every group.
	Place string `json:"pl,omitempty"`
}

// PlaceOwn is Hello.Place of a replica that runs only the named groups it
// votes in.
const PlaceOwn = "own"

// GroupHello is one named group as a replica runs it.
type GroupHello struct {
	Name string `json:"n"`
	// Group is the digest of the DeploymentID, the name and the voters.
	Group  string   `json:"g"`
	Voters []uint64 `json:"v"`
	// GroupID is the group's ID once this replica applied it.
	GroupID uint64 `json:"id,omitempty"`
	// Shard is the group's Dragonboat shard ID (the group table gives a
	// group created again under an old name another one); absent from a
	// peer of a version before the table, whose groups are on the shard
	// their names give.
	Shard uint64 `json:"s,omitempty"`
}

// Local is one replica's side of the handshake.
type Local interface {
	// Hello is what this replica says.
	Hello() Hello
	// Check decides whether to talk to the peer that said h: nil to talk,
	// else an error naming the difference, which both sides log.
	Check(h Hello) error
	// Contact reports traffic from replica id, for the replica's view of
	// which peers it reaches.
	Contact(id uint64)
}

// Binder is implemented by the transport factories that carry a Hello:
// Bind returns a factory whose connections use l.
type Binder interface {
	Bind(l Local) config.TransportFactory
}

// MaxHello bounds an encoded Hello; a peer's larger one is refused unread.
const MaxHello = 64 << 10

// ErrBadHello reports bytes that are not a valid Hello.
var ErrBadHello = errors.New("peering: malformed hello")

// Marshal encodes h.
func (h Hello) Marshal() []byte {
	b, err := json.Marshal(h)
	if err != nil {
		panic(err) // a struct of strings and integers always encodes
	}
	return b
}

// Unmarshal decodes a Hello a peer sent. Anything but one well-formed Hello
// of at most MaxHello bytes, with a replica ID and an address, is an error
// wrapping ErrBadHello.
func Unmarshal(b []byte) (Hello, error) {
	var h Hello
	if len(b) > MaxHello {
		return Hello{}, fmt.Errorf("%w: %d bytes", ErrBadHello, len(b))
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return Hello{}, fmt.Errorf("%w: %v", ErrBadHello, err)
	}
	if h.Replica == 0 || h.Addr == "" {
		return Hello{}, fmt.Errorf("%w: no replica ID or address", ErrBadHello)
	}
	return h, nil
}

// FormatMembers writes a membership as "1=host:port, 2=host:port", in ID
// order.
func FormatMembers(m map[uint64]string) string {
	var b strings.Builder
	for i, id := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d=%s", id, m[id])
	}
	return b.String()
}

// DiffMembers describes how membership there differs from here, entry by
// entry, e.g. "3 is 127.0.0.1:7304 there, 127.0.0.1:7303 here; 4 only
// there (127.0.0.1:7305)".
func DiffMembers(there, here map[uint64]string) string {
	ids := slices.Sorted(maps.Keys(maps.Collect(func(yield func(uint64, struct{}) bool) {
		for id := range there {
			yield(id, struct{}{})
		}
		for id := range here {
			yield(id, struct{}{})
		}
	})))
	var parts []string
	for _, id := range ids {
		a, inThere := there[id]
		b, inHere := here[id]
		switch {
		case inThere && inHere && a != b:
			parts = append(parts, fmt.Sprintf("%d is %s there, %s here", id, a, b))
		case inThere && !inHere:
			parts = append(parts, fmt.Sprintf("%d only there (%s)", id, a))
		case !inThere && inHere:
			parts = append(parts, fmt.Sprintf("%d only here (%s)", id, b))
		}
	}
	if len(parts) == 0 {
		return "the same members"
	}
	return strings.Join(parts, "; ")
}
