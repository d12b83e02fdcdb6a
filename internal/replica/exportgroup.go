package replica

// A backup's copy of every group of the deployment (the root's
// Node.Snapshot). A group this host runs is exported here (Export); one it
// does not run (Placement own groups, or a group SetVoters moved off it)
// is exported by one of its voters, asked over a call connection as a
// mirror subscribes (the mirror's own server first, then the voters in
// turn), which streams the copy back (package serve) into the same
// directory layout, so the backup file is written the same way from both.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/backup"
	"github.com/fencelock/fencelock/internal/replica/shard"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/transport"
)

// GroupExport is one group's copy for a backup.
type GroupExport struct {
	Name string // "" for the default group
	Exported
}

// exportTarget is a group to copy: its shard and voters.
type exportTarget struct {
	name   string
	shard  uint64
	voters []uint64
}

// ExportGroups writes a copy of every group of the deployment into dir
// (which must exist), the default group first, then the group table's in
// name order (before the table is set, Config.Groups'): each linearizable
// as Export is. It fails, naming the group, if one cannot be copied: with
// ErrUnavailable (and ctx's error, or ErrNoQuorum) when neither this host
// nor any of the group's voters could export it before ctx ended.
func (h *Host) ExportGroups(ctx context.Context, dir string) ([]GroupExport, error) {
	targets, err := h.exportTargets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]GroupExport, 0, len(targets))
	for i, t := range targets {
		sub := filepath.Join(dir, fmt.Sprint(i))
		if err := os.Mkdir(sub, 0o700); err != nil {
			return nil, err
		}
		ex, err := h.exportGroup(ctx, t, sub)
		if err != nil {
			return nil, fmt.Errorf("snapshot of %s: %w", shard.GroupLabel(t.name), err)
		}
		out = append(out, GroupExport{Name: t.name, Exported: ex})
	}
	return out, nil
}

// exportTargets returns the groups a backup holds: the default group and
// the table's (a linearizable read), or Config.Groups' before it is set.
func (h *Host) exportTargets(ctx context.Context) ([]exportTarget, error) {
	v, err := h.readTable(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot: the group table: %w", err)
	}
	targets := []exportTarget{{name: "", shard: defaultShard}}
	if v.Set {
		for _, e := range v.Groups {
			targets = append(targets, exportTarget{name: e.Name, shard: e.Shard, voters: e.Voters})
		}
		return targets, nil
	}
	for _, g := range h.cfg.Groups {
		targets = append(targets, exportTarget{name: g.Name, shard: GroupShardID(g.Name), voters: slices.Clone(g.Voters)})
	}
	return targets, nil
}

// exportGroup copies group t into dir: here if this host runs it, else
// from one of its voters.
func (h *Host) exportGroup(ctx context.Context, t exportTarget, dir string) (Exported, error) {
	if r := h.running(t.name); r != nil && r.ShardID() == t.shard {
		return export(ctx, r, dir)
	}
	if t.name == "" {
		return Exported{}, fmt.Errorf("%w: this replica does not run the default group", ErrUnavailable)
	}
	return h.exportRemote(ctx, t, dir)
}

// exportRemote asks t's voters in turn, the one feeding this host's mirror
// of it first, to export it, until one sends its copy.
func (h *Host) exportRemote(ctx context.Context, t exportTarget, dir string) (Exported, error) {
	var ex Exported
	err := h.askVoters(ctx, t.name, t.voters, func(id uint64, addr string) (err error) {
		if ex, err = h.exportFrom(ctx, t, addr, dir); err == nil {
			return nil
		}
		h.log.Warn("fencelock: a voter could not export a group for a backup; asking the next", "group", t.name, "voter", id, "err", err)
		if cerr := clearDir(dir); cerr != nil {
			return &stopAsking{cerr}
		}
		return err
	})
	if stop, ok := err.(*stopAsking); ok {
		return Exported{}, stop.err
	}
	if err != nil {
		return Exported{}, fmt.Errorf("group %q: none of its voters %v exported it for this backup: %w", t.name, t.voters, err)
	}
	return ex, nil
}

// askVoters calls try with each of group name's voters in askOrder, and
// its address, until one succeeds (nil). If none does it returns
// ErrUnavailable with each one's failure; a try that returns a stopAsking
// ends the asking with it.
func (h *Host) askVoters(ctx context.Context, name string, voters []uint64, try func(id uint64, addr string) error) error {
	if h.calls == nil {
		return fmt.Errorf("%w: group %q runs on replicas %v, not this one, and the transport carries no calls between replicas",
			ErrUnavailable, name, voters)
	}
	order := h.askOrder(name, voters)
	var errs []error
	for _, id := range order {
		if ctx.Err() != nil {
			break
		}
		addr, ok := h.memberAddr(name, id)
		if !ok {
			errs = append(errs, fmt.Errorf("replica %d: no address known", id))
			continue
		}
		err := try(id, addr)
		if err == nil {
			return nil
		}
		if _, ok := err.(*stopAsking); ok {
			return err
		}
		errs = append(errs, fmt.Errorf("replica %d at %s: %w", id, addr, err))
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(order) == 0 {
		errs = append(errs, errors.New("it has no voter besides this replica, which does not run it"))
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
}

// stopAsking is a try's failure that must not be retried at another voter.
type stopAsking struct{ err error }

func (s *stopAsking) Error() string { return s.err.Error() }

// exportFrom asks the replica at addr to export group t, and writes what
// it sends into dir as Export would have.
func (h *Host) exportFrom(ctx context.Context, t exportTarget, addr, dir string) (Exported, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*h.cfg.ProposalTimeout)
	c, err := h.calls.DialCall(dctx, addr)
	cancel()
	if err != nil {
		return Exported{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	req := wire.Msg{Kind: wire.KindExport, Shard: t.shard, Name: t.name}
	if d, ok := ctx.Deadline(); ok {
		req.Timeout = uint64(max(time.Until(d).Milliseconds(), 1))
	}
	if err := c.Send(req.Encode(nil)); err != nil {
		return Exported{}, err
	}
	c.SetIdle(wire.IdleAfter) // the server pings while it writes the copy
	head, err := recvReply(ctx, c, wire.KindExportHead)
	if err != nil {
		return Exported{}, err
	}
	rec, ss, err := backup.DecodeMetadata(head.Data)
	if err != nil {
		return Exported{}, err
	}
	if ss.Index != head.Index || ss.ShardID != t.shard || ss.FileSize == 0 || ss.FileSize > backup.MaxFile {
		return Exported{}, fmt.Errorf("%w: an export of shard %x at index %d, of %d bytes, for shard %x at index %d",
			wire.ErrMalformed, ss.ShardID, ss.Index, ss.FileSize, t.shard, head.Index)
	}
	sub := filepath.Join(dir, fmt.Sprintf("snapshot-%016X", ss.Index))
	if err := os.Mkdir(sub, 0o700); err != nil {
		return Exported{}, err
	}
	if err := os.WriteFile(filepath.Join(sub, backup.MetadataFile), head.Data, 0o600); err != nil {
		return Exported{}, err
	}
	file := filepath.Join(sub, fmt.Sprintf("snapshot-%016X.gbsnap", ss.Index))
	if err := recvFile(ctx, c, file, ss.FileSize); err != nil {
		return Exported{}, err
	}
	ex, err := checkExport(rec, ss, file, ss.Index)
	if err != nil {
		return Exported{}, err
	}
	ex.Sessions, ex.Locks, ex.Elections = int(head.Sessions), int(head.Locks), int(head.Elections)
	return ex, nil
}

// askOrder is the order in which to ask voters of group name for something
// this host cannot do itself: the one feeding its mirror of the group
// first, then the others in turn, never this host.
func (h *Host) askOrder(name string, voters []uint64) []uint64 {
	order := slices.DeleteFunc(slices.Clone(voters), func(id uint64) bool { return id == h.cfg.ReplicaID })
	if m := h.mirror(name); m != nil {
		if s := m.Server(); slices.Contains(order, s) {
			i := slices.Index(order, s)
			order = append(order[i:], order[:i]...)
		}
	}
	return order
}

// recvReply returns the next message of kind want on a call connection
// (an export's or a membership read's), skipping pings; a refusal is an
// exportRefusal.
func recvReply(ctx context.Context, c transport.CallConn, want byte) (wire.Msg, error) {
	for {
		b, err := c.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return wire.Msg{}, ctx.Err()
			}
			// A replica of a build that does not serve the request (an
			// upgrade in progress) closes the connection so.
			return wire.Msg{}, fmt.Errorf("the connection ended with no answer (a replica of an older build, which does not serve this request, ends it so): %w", err)
		}
		m, err := wire.Decode(b)
		if err != nil {
			return wire.Msg{}, err
		}
		switch m.Kind {
		case wire.KindPing:
			continue
		case wire.KindRefuse:
			return wire.Msg{}, &exportRefusal{code: m.Code, text: m.Text}
		case want:
			return m, nil
		}
		return wire.Msg{}, fmt.Errorf("%w: kind %d in an export", wire.ErrMalformed, m.Kind)
	}
}

// recvFile writes the size bytes of snapshot file the server sends into
// file, as exportData messages (wire.RecvParts); a byte more is an error.
func recvFile(ctx context.Context, c transport.CallConn, file string, size uint64) (err error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	next := func() (wire.Msg, error) { return recvReply(ctx, c, wire.KindExportData) }
	return wire.RecvParts(next, nil, f, 0, size, wire.MaxExportData)
}

// exportRefusal is a voter's refusal to export a group.
type exportRefusal struct {
	code byte
	text string
}

func (e *exportRefusal) Error() string { return "refused: " + e.text }

func (e *exportRefusal) Unwrap() error {
	if e.code == wire.CodeNoQuorum {
		return ErrNoQuorum
	}
	return nil
}

// clearDir empties dir for the next attempt.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// memberAddr returns the raft address of replica id, a voter of group:
// the deployment's, as last applied here, else the table's bootstrap
// address for the group.
func (h *Host) memberAddr(group string, id uint64) (string, bool) {
	if p := h.peers.members.Load(); p != nil {
		if a, ok := (*p)[id]; ok {
			return a, true
		}
	}
	if v := h.table.Current(); v != nil {
		if e, ok := v.Find(group); ok {
			for _, b := range e.Bootstrap {
				if b.ID == id {
					return b.Addr, true
				}
			}
		}
	}
	return "", false
}
