package fsm

// The group table (version 9): the deployment's named groups, held as
// replicated state by the default group, so that groups are created,
// dropped and given other voters by commands, online, and every replica
// learns of it from the log it applies anyway.
//
// An entry is a group's name, its Dragonboat shard ID (fixed when it is
// created: a group dropped and created again under the same name gets
// another, so that no message of the old incarnation reaches the new),
// the voters it should have, the replicas it removed (a removed replica ID
// can never be a member of that shard again), and its bootstrap voters
// with their raft addresses: the members map every initial voter starts
// the shard with. The table says what the groups should be; moving a
// group's raft membership to match is the replicas' work (internal/replica),
// one change at a time.
//
// Every other replica of the deployment runs a group as a non-voting
// member: the table lists no non-voting members of its own.
//
// The table is "set" once the first table command applied: a Seed (the
// Config.Groups of a new deployment, or of one upgraded from a version
// without the table) applies only while it is not, so that a replica
// restarted with another Config.Groups never makes a second table.
//
// The kinds' numbers leave room after maxKind for the lock state
// machine's own kinds: the table's commands are the default group's
// business alone, and their codec and apply live here.

import (
	"encoding/binary"
	"slices"
	"strings"
)

// The group table's command kinds (version 9). Their numeric values are
// part of the wire format. Each carries an operation ID (Command.Op): a
// retry of one that applied changes nothing and gets the first outcome.
const (
	// KindGroupSeed sets the table to Command.Groups if it was never set;
	// otherwise it changes nothing and is answered NotApplied. Each spec
	// has a name, a shard ID, voters and bootstrap members.
	KindGroupSeed Kind = 32
	// KindGroupCreate adds Command.Groups[0] (name, shard, voters,
	// bootstrap members) to the table. A name the table has is Conflict;
	// a shard ID another group has is Invalid (GroupShardTaken).
	KindGroupCreate Kind = 33
	// KindGroupDrop removes group Command.Groups[0].Name from the table;
	// an unknown name is NotApplied.
	KindGroupDrop Kind = 34
	// KindGroupSetVoters makes Command.Groups[0].Voters the voters of
	// group Command.Groups[0].Name; the voters it no longer lists join the
	// group's removed replicas. An unknown group is NotApplied; a voter the
	// group removed before is Invalid (GroupVoterRemoved).
	KindGroupSetVoters Kind = 35
)

// EventGroupTable reports that the group table changed: Name is the group
// the command named ("" for a seed). The table itself is read with
// GroupTable.
const EventGroupTable EventKind = 64

// The bounds of the table: what one entry or snapshot may hold.
const (
	// MaxGroups is the most groups the table holds.
	MaxGroups = 256
	// MaxGroupVoters is the most voters a group may have.
	MaxGroupVoters = 7
	// MaxGroupNameLen is the longest group name, in bytes.
	MaxGroupNameLen = 32
	// maxAddrLen bounds a raft address.
	maxAddrLen = 256
	// maxGroupRemoved bounds how many replica IDs one group records as
	// removed.
	maxGroupRemoved = 1 << 12
)

// The Value of an Invalid result of a table command, saying why.
const (
	// GroupInvalidSpec: a name that is not 1 to MaxGroupNameLen of
	// [a-z0-9-], a shard ID below 2, voters that are not 1 to
	// MaxGroupVoters distinct IDs in increasing order, bootstrap members
	// that are not the voters, or a seed naming a group twice.
	GroupInvalidSpec = 16
	// GroupVoterRemoved: SetVoters named a replica the group removed.
	GroupVoterRemoved = 17
	// GroupShardTaken: Create named a shard ID another group has.
	GroupShardTaken = 18
)

// LimitGroups is the Value of a LimitExceeded Create: the table holds
// MaxGroups groups already.
const LimitGroups Limit = 16

// GroupMember is a replica and its raft address.
type GroupMember struct {
	ID   uint64
	Addr string
}

// GroupSpec is a group as a table command names it.
type GroupSpec struct {
	Name  string
	Shard uint64
	// Voters are in increasing order, without duplicates.
	Voters []uint64
	// Bootstrap is, for a Seed or a Create, every voter with its raft
	// address, in increasing order of ID.
	Bootstrap []GroupMember
}

// GroupEntry is one group of the table.
type GroupEntry struct {
	Name  string
	Shard uint64
	// Created is the index of the entry that created (or seeded) it.
	Created   uint64
	Voters    []uint64      // increasing
	Removed   []uint64      // increasing: never members of this shard again
	Bootstrap []GroupMember // the initial voters, increasing by ID
}

// groupTable is the table in the state; groups are in name order.
type groupTable struct {
	set    bool
	groups []GroupEntry
}

// IsGroupTableKind reports whether k is one of the group table's kinds.
func IsGroupTableKind(k Kind) bool { return k >= KindGroupSeed && k <= KindGroupSetVoters }

// groupTableKindName names the table's kinds for Kind.String ("" for any
// other kind).
func groupTableKindName(k Kind) string {
	switch k {
	case KindGroupSeed:
		return "group-seed"
	case KindGroupCreate:
		return "group-create"
	case KindGroupDrop:
		return "group-drop"
	case KindGroupSetVoters:
		return "group-set-voters"
	}
	return ""
}

// ValidGroupName reports whether name may name a group: 1 to
// MaxGroupNameLen of [a-z0-9-].
func ValidGroupName(name string) bool {
	if name == "" || len(name) > MaxGroupNameLen {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validVoters reports whether ids are 1 to MaxGroupVoters non-zero IDs in
// increasing order.
func validVoters(ids []uint64) bool {
	if len(ids) == 0 || len(ids) > MaxGroupVoters {
		return false
	}
	for i, id := range ids {
		if id == 0 || i > 0 && ids[i-1] >= id {
			return false
		}
	}
	return true
}

// validSpec reports whether g may be created: see GroupInvalidSpec.
func validSpec(g *GroupSpec) bool {
	if !ValidGroupName(g.Name) || g.Shard < 2 || !validVoters(g.Voters) || len(g.Bootstrap) != len(g.Voters) {
		return false
	}
	for i, m := range g.Bootstrap {
		if m.ID != g.Voters[i] || m.Addr == "" || len(m.Addr) > maxAddrLen {
			return false
		}
	}
	return true
}

// applyGroupTable applies a table command once per operation ID.
func (st *State) applyGroupTable(index uint64, c *Command) Result {
	return st.operator(c, func() Result {
		switch c.Kind {
		case KindGroupSeed:
			return st.seedGroups(index, c.Groups)
		case KindGroupCreate, KindGroupDrop, KindGroupSetVoters:
			if len(c.Groups) != 1 {
				return Result{Status: Invalid, Value: GroupInvalidSpec}
			}
		}
		g := &c.Groups[0]
		switch c.Kind {
		case KindGroupCreate:
			return st.createGroup(index, g)
		case KindGroupDrop:
			return st.dropGroup(index, g.Name)
		}
		return st.setGroupVoters(index, g)
	})
}

func (st *State) seedGroups(index uint64, specs []GroupSpec) Result {
	if st.table.set {
		return Result{Status: NotApplied}
	}
	if len(specs) > MaxGroups {
		return limitExceeded(LimitGroups)
	}
	groups := make([]GroupEntry, 0, len(specs))
	for i := range specs {
		g := &specs[i]
		if !validSpec(g) {
			return Result{Status: Invalid, Value: GroupInvalidSpec}
		}
		for _, e := range groups {
			if e.Name == g.Name || e.Shard == g.Shard {
				return Result{Status: Invalid, Value: GroupInvalidSpec}
			}
		}
		groups = append(groups, newEntry(index, g))
	}
	slices.SortFunc(groups, func(a, b GroupEntry) int { return strings.Compare(a.Name, b.Name) })
	st.table = groupTable{set: true, groups: groups}
	st.emit(Event{Kind: EventGroupTable, Index: index})
	return Result{Status: OK, Value: uint64(len(groups))}
}

func newEntry(index uint64, g *GroupSpec) GroupEntry {
	return GroupEntry{Name: g.Name, Shard: g.Shard, Created: index,
		Voters: slices.Clone(g.Voters), Bootstrap: slices.Clone(g.Bootstrap)}
}

func (st *State) createGroup(index uint64, g *GroupSpec) Result {
	if !validSpec(g) {
		return Result{Status: Invalid, Value: GroupInvalidSpec}
	}
	i, found := st.findGroup(g.Name)
	if found {
		return Result{Status: Conflict, Value: st.table.groups[i].Shard}
	}
	for _, e := range st.table.groups {
		if e.Shard == g.Shard {
			return Result{Status: Invalid, Value: GroupShardTaken}
		}
	}
	if len(st.table.groups) >= MaxGroups {
		return limitExceeded(LimitGroups)
	}
	st.table.set = true
	st.table.groups = slices.Insert(st.table.groups, i, newEntry(index, g))
	st.emit(Event{Kind: EventGroupTable, Index: index, Name: g.Name})
	return Result{Status: OK, Value: g.Shard}
}

func (st *State) dropGroup(index uint64, name string) Result {
	i, found := st.findGroup(name)
	if !found {
		return Result{Status: NotApplied}
	}
	shard := st.table.groups[i].Shard
	st.table.groups = slices.Delete(st.table.groups, i, i+1)
	st.emit(Event{Kind: EventGroupTable, Index: index, Name: name})
	return Result{Status: OK, Value: shard}
}

func (st *State) setGroupVoters(index uint64, g *GroupSpec) Result {
	i, found := st.findGroup(g.Name)
	if !found {
		return Result{Status: NotApplied}
	}
	if !validVoters(g.Voters) {
		return Result{Status: Invalid, Value: GroupInvalidSpec}
	}
	e := &st.table.groups[i]
	for _, id := range g.Voters {
		if _, removed := slices.BinarySearch(e.Removed, id); removed {
			return Result{Status: Invalid, Value: GroupVoterRemoved}
		}
	}
	if slices.Equal(e.Voters, g.Voters) {
		return Result{Status: OK, Value: e.Shard}
	}
	removed := slices.Clone(e.Removed)
	for _, id := range e.Voters {
		if _, stays := slices.BinarySearch(g.Voters, id); !stays {
			removed = append(removed, id)
		}
	}
	slices.Sort(removed)
	if len(removed) > maxGroupRemoved {
		return Result{Status: Invalid, Value: GroupInvalidSpec}
	}
	e.Voters, e.Removed = slices.Clone(g.Voters), removed
	st.emit(Event{Kind: EventGroupTable, Index: index, Name: g.Name})
	return Result{Status: OK, Value: e.Shard}
}

// findGroup returns where group name is in the table, or would be.
func (st *State) findGroup(name string) (int, bool) {
	return slices.BinarySearchFunc(st.table.groups, name, func(e GroupEntry, name string) int {
		return strings.Compare(e.Name, name)
	})
}

// GroupTable returns a copy of the group table, in name order, and whether
// it was ever set (a deployment whose table was never set runs the groups
// of its replicas' Config.Groups).
func (st *State) GroupTable() (groups []GroupEntry, set bool) {
	groups = make([]GroupEntry, len(st.table.groups))
	for i, e := range st.table.groups {
		groups[i] = GroupEntry{Name: e.Name, Shard: e.Shard, Created: e.Created,
			Voters: slices.Clone(e.Voters), Removed: slices.Clone(e.Removed), Bootstrap: slices.Clone(e.Bootstrap)}
	}
	return groups, st.table.set
}

// The table's codec. A command's fields follow its kind byte:
//
//	seed      = op count spec*count
//	create    = op spec
//	drop      = op name
//	setVoters = op name voters:count id*
//	spec      = name shard voters:count id* (addr)*voters
//
// where a spec's addresses are its bootstrap members', one per voter in
// the voters' order.

// appendGroupCommand appends the fields of table command c.
func appendGroupCommand(dst []byte, c *Command) []byte {
	u := binary.AppendUvarint
	dst = u(dst, c.Op)
	switch c.Kind {
	case KindGroupSeed:
		dst = u(dst, uint64(len(c.Groups)))
		for i := range c.Groups {
			dst = appendSpec(dst, &c.Groups[i])
		}
		return dst
	}
	var g GroupSpec
	if len(c.Groups) > 0 {
		g = c.Groups[0]
	}
	switch c.Kind {
	case KindGroupCreate:
		dst = appendSpec(dst, &g)
	case KindGroupDrop:
		dst = appendString(dst, g.Name)
	case KindGroupSetVoters:
		dst = appendIDs(appendString(dst, g.Name), g.Voters)
	}
	return dst
}

func appendSpec(dst []byte, g *GroupSpec) []byte {
	dst = binary.AppendUvarint(appendString(dst, g.Name), g.Shard)
	dst = appendIDs(dst, g.Voters)
	for i := range g.Voters {
		addr := ""
		if i < len(g.Bootstrap) {
			addr = g.Bootstrap[i].Addr
		}
		dst = appendString(dst, addr)
	}
	return dst
}

func appendIDs(dst []byte, ids []uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, id)
	}
	return dst
}

// tableReader is what the table's decoding needs of a decoder: the
// entry's and the snapshot's have it alike.
type tableReader interface {
	uvarint() uint64
	bool() bool
	count() uint64
	string(limit uint64, what string) string
	fail(format string, args ...any)
	failed() bool
}

func (d *decoder) failed() bool     { return d.err != nil }
func (d *decoder) count() uint64    { return d.uvarint() }
func (d *snapDecoder) failed() bool { return d.err != nil }

// groupCommand decodes the fields of table command c, which need version
// 9. Whether the specs are valid is Apply's business (an Invalid result),
// as for a lock's name: the decoder only bounds what it allocates.
func (d *decoder) groupCommand(c *Command) {
	if d.version < 9 {
		d.fail("command kind %d in a version-%d entry", c.Kind, d.version)
		return
	}
	c.Op = d.uvarint()
	switch c.Kind {
	case KindGroupSeed:
		n := d.uvarint()
		if d.err != nil {
			return
		}
		if n > MaxGroups || n > uint64(len(d.b)) {
			d.fail("%d groups in a seed", n)
			return
		}
		c.Groups = make([]GroupSpec, n)
		for i := range c.Groups {
			readSpec(d, &c.Groups[i])
		}
	case KindGroupCreate:
		c.Groups = make([]GroupSpec, 1)
		readSpec(d, &c.Groups[0])
	case KindGroupDrop:
		c.Groups = []GroupSpec{{Name: d.string(MaxGroupNameLen, "group name")}}
	case KindGroupSetVoters:
		g := GroupSpec{Name: d.string(MaxGroupNameLen, "group name")}
		g.Voters = readIDs(d, MaxGroupVoters, "voters")
		c.Groups = []GroupSpec{g}
	}
}

func readSpec(r tableReader, g *GroupSpec) {
	g.Name = r.string(MaxGroupNameLen, "group name")
	g.Shard = r.uvarint()
	g.Voters = readIDs(r, MaxGroupVoters, "voters")
	if r.failed() {
		return
	}
	g.Bootstrap = make([]GroupMember, len(g.Voters))
	for i, id := range g.Voters {
		g.Bootstrap[i] = GroupMember{ID: id, Addr: r.string(maxAddrLen, "address")}
	}
}

// readIDs reads a count of at most limit and that many IDs.
func readIDs(r tableReader, limit uint64, what string) []uint64 {
	n := r.uvarint()
	if r.failed() {
		return nil
	}
	if n > limit {
		r.fail("%d %s", n, what)
		return nil
	}
	if n == 0 {
		return nil
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = r.uvarint()
	}
	return ids
}

// The table's part of a snapshot (version 7), after the remembered
// operations:
//
//	table = set:byte count entry*count
//	entry = name shard created voters:count id* removed:count id*
//	        bootstrap:count (id addr)*
//
// with the entries in name order.

// appendGroupTable appends the table's part of a snapshot.
func appendGroupTable(buf []byte, st *State) []byte {
	u := binary.AppendUvarint
	buf = append(buf, boolByte(st.table.set))
	buf = u(buf, uint64(len(st.table.groups)))
	for _, e := range st.table.groups {
		buf = u(u(appendString(buf, e.Name), e.Shard), e.Created)
		buf = appendIDs(appendIDs(buf, e.Voters), e.Removed)
		buf = u(buf, uint64(len(e.Bootstrap)))
		for _, m := range e.Bootstrap {
			buf = appendString(u(buf, m.ID), m.Addr)
		}
	}
	return buf
}

// groupTable reads the table's part of a snapshot into st.
func (d *snapDecoder) groupTable(st *State) {
	if t, ok := readGroupTable(d, st.index); ok {
		st.table = t
	}
}

// readGroupTable reads the table's part of a snapshot of a state at index,
// refusing anything Apply could not have made; ok is false once r failed.
func readGroupTable(r tableReader, index uint64) (_ groupTable, ok bool) {
	set := r.bool()
	n := r.count()
	if !r.failed() && (n > MaxGroups || n > 0 && !set) {
		r.fail("a table of %d groups (set %v)", n, set)
	}
	if r.failed() {
		return groupTable{}, false
	}
	t := groupTable{set: set, groups: make([]GroupEntry, 0, n)}
	for range n {
		e := GroupEntry{Name: r.string(MaxGroupNameLen, "group name"), Shard: r.uvarint(), Created: r.uvarint()}
		e.Voters = readIDs(r, MaxGroupVoters, "voters")
		e.Removed = readIDs(r, maxGroupRemoved, "removed replicas")
		nb := r.uvarint()
		if !r.failed() && nb > MaxGroupVoters {
			r.fail("%d bootstrap members", nb)
		}
		if r.failed() {
			return groupTable{}, false
		}
		e.Bootstrap = make([]GroupMember, nb)
		for i := range e.Bootstrap {
			e.Bootstrap[i] = GroupMember{ID: r.uvarint(), Addr: r.string(maxAddrLen, "address")}
		}
		if r.failed() {
			return groupTable{}, false
		}
		boot := GroupSpec{Name: e.Name, Shard: e.Shard, Voters: make([]uint64, len(e.Bootstrap)), Bootstrap: e.Bootstrap}
		for i, m := range e.Bootstrap {
			boot.Voters[i] = m.ID
		}
		switch {
		case !validSpec(&boot) || !validVoters(e.Voters) || e.Created == 0 || e.Created > index:
			r.fail("bad group %.40q", e.Name)
		case len(t.groups) > 0 && t.groups[len(t.groups)-1].Name >= e.Name:
			r.fail("groups out of order at %.40q", e.Name)
		case !increasing(e.Removed):
			r.fail("bad removed replicas of group %.40q", e.Name)
		}
		for _, o := range t.groups {
			if o.Shard == e.Shard {
				r.fail("groups %.40q and %.40q share shard %d", o.Name, e.Name, e.Shard)
			}
		}
		for _, id := range e.Voters {
			if _, removed := slices.BinarySearch(e.Removed, id); removed {
				r.fail("group %.40q: voter %d was removed", e.Name, id)
			}
		}
		if r.failed() {
			return groupTable{}, false
		}
		t.groups = append(t.groups, e)
	}
	return t, true
}

// increasing reports whether ids are non-zero and strictly increasing.
func increasing(ids []uint64) bool {
	for i, id := range ids {
		if id == 0 || i > 0 && ids[i-1] >= id {
			return false
		}
	}
	return true
}

// Draining returns the commands that empty the group without granting
// anything, for a drop: a Cancel of every queued request and candidacy,
// and then a Revoke, by token, of every grant of a lock or leadership
// (held counts them; a lock under a lock-delay, held by nobody, is not
// one). Applied in this order, each withdrawal leaves the queues behind
// it empty (each queue is withdrawn from its tail), so none lets a request
// in, and each revoke finds its queue empty, so none passes a lock on: as
// long as nothing queues meanwhile, no command of the list grants
// anything. A session's own end, or a revoke before the withdrawals, would
// grant its queue's head first (issue 48, item 7). The order is locks,
// then elections, each by name; a revoke's Op is the caller's to draw.
func (st *State) Draining() (cmds []Command, held int) {
	var revokes []Command
	for _, t := range []*lockTable{st.locks, st.elections} {
		var ls []*lock
		for l := range t.all {
			ls = append(ls, l)
		}
		slices.SortFunc(ls, func(a, b *lock) int { return strings.Compare(a.name, b.name) })
		for _, l := range ls {
			var queue []*waiter
			for w := range l.queued {
				queue = append(queue, w)
			}
			for _, w := range slices.Backward(queue) {
				// The session's floor: a Cancel below its base would be
				// refused as its old incarnation's, and one above it would
				// forget replies its holder may still need.
				cmds = append(cmds, Command{Kind: KindCancel, Session: w.s.id, Target: w.seq, Floor: w.s.floor,
					Name: l.name, Election: l.election})
			}
			for h := range l.grants {
				revokes = append(revokes, Command{Kind: KindRevoke, Name: l.name, Token: h.token, Election: l.election})
			}
		}
	}
	return append(cmds, revokes...), len(revokes)
}
