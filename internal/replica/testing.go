package replica

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/logstore"
	"github.com/fencelock/fencelock/internal/replica/serve"
	"github.com/fencelock/fencelock/internal/replica/wire"
)

// TestingCrash is for tests: it kills the host (every group's replica on
// it) as the death of its process would (SIGKILL, power loss) rather than
// as Close's clean shutdown; the caller closes it next, as it would close a
// dead process's resources. The death comes at a moment when the log store
// holds a commit-only save it defers (at once, or at the next such save; at
// the latest when ctx ends): from then on nothing the host does reaches its
// peers or is heard from them, and its log store drops the deferred commit
// indexes when the NodeHost closes it, instead of writing them
// (logstore.Store.Crash). A restart on the same Dir then finds older commit
// indexes on disk, replays the logs only up to them and learns the rest
// from the groups. Nothing else differs from Close: entries, terms and
// votes are synced as they are saved, and the state machines live in
// memory. Production code never calls it.
func (h *Host) TestingCrash(ctx context.Context) {
	if s := h.store.Load(); s != nil {
		select {
		case <-s.Crash(func() { h.down.Store(true) }):
		case <-ctx.Done():
		}
	}
	h.down.Store(true)
}

// TestingLogStoreStats returns the counts of the host's log store (what
// it wrote, deferred, flushed and, after a crash, dropped).
func (h *Host) TestingLogStoreStats() logstore.Stats {
	if s := h.store.Load(); s != nil {
		return s.Stats()
	}
	return logstore.Stats{}
}

// crashGate wraps the host's transport so that TestingCrash can cut it off at
// once: a dead process sends nothing and hears nothing. In production down
// is never set and the gate only reads it.
type crashGate struct {
	config.TransportFactory
	down    *atomic.Bool
	streams *streamCount
}

// streamCount counts the message connections the host's transport opened,
// by target: one per stream Dragonboat keeps to a peer (and another after
// one failed or idled out). Tests read it (TestingMessageStreams).
type streamCount struct {
	mu     sync.Mutex
	opened map[string]int
}

func (s *streamCount) add(target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened == nil {
		s.opened = map[string]int{}
	}
	s.opened[target]++
}

// TestingMessageStreams returns how many message connections this host's
// transport opened to each target since the host started.
func (h *Host) TestingMessageStreams() map[string]int {
	h.streams.mu.Lock()
	defer h.streams.mu.Unlock()
	return maps.Clone(h.streams.opened)
}

func (g crashGate) Create(nhc config.NodeHostConfig, mh raftio.MessageHandler, ch raftio.ChunkHandler) raftio.ITransport {
	return gatedTransport{g.TransportFactory.Create(nhc,
		func(b pb.MessageBatch) {
			if !g.down.Load() {
				mh(b)
			}
		},
		func(c pb.Chunk) bool { return !g.down.Load() && ch(c) }), g.down, g.streams}
}

type gatedTransport struct {
	raftio.ITransport
	down    *atomic.Bool
	streams *streamCount
}

func (t gatedTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	c, err := t.ITransport.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	t.streams.add(target)
	return gatedConn{c, t.down}, nil
}

func (t gatedTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	c, err := t.ITransport.GetSnapshotConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return gatedSnapshotConn{c, t.down}, nil
}

type gatedConn struct {
	raftio.IConnection
	down *atomic.Bool
}

func (c gatedConn) SendMessageBatch(b pb.MessageBatch) error {
	if c.down.Load() {
		return ErrClosed
	}
	return c.IConnection.SendMessageBatch(b)
}

type gatedSnapshotConn struct {
	raftio.ISnapshotConnection
	down *atomic.Bool
}

func (c gatedSnapshotConn) SendChunk(chunk pb.Chunk) error {
	if c.down.Load() {
		return ErrClosed
	}
	return c.ISnapshotConnection.SendChunk(chunk)
}

// TestingNewDirShards makes the hosts started from now on create a new Dir
// with exec step workers and logdb log partitions, as a build before the
// single worker did (16 and 16), until restore is called: a test makes an
// old Dir with it and checks it still opens. Production code never calls
// it.
func TestingNewDirShards(exec, logdb uint64) (restore func()) {
	e, l := newDirExecShards.Swap(exec), newDirLogDBShards.Swap(logdb)
	return func() { newDirExecShards.Store(e); newDirLogDBShards.Store(l) }
}

// TestingRecordedShards returns the step workers and log partitions that
// the Dir records (ok false if it records none).
func TestingRecordedShards(dir string) (exec, logdb uint64, ok bool) {
	return recordedShards(dir)
}

// TestingEngineConfigs returns the engine and log store settings a host
// starts a NodeHost on dir with (what dir records, or a new Dir's): a test
// that opens a stopped replica's log store itself needs them, as
// Dragonboat's partitioning of the shards depends on them.
func TestingEngineConfigs(dir string) (config.EngineConfig, config.LogDBConfig) {
	return engineConfigs(dir)
}

// TestingPauseBalancer stops (or restarts) the balancer of this host, for
// tests that place leaders themselves; when it returns, no transfer the
// balancer started is in flight.
func (h *Host) TestingPauseBalancer(paused bool) {
	h.bal.mu.Lock()
	defer h.bal.mu.Unlock()
	h.bal.paused = paused
}

// TestingLogShards returns the shards whose raft data this host's log
// store holds, for tests of placement.
func (h *Host) TestingLogShards() []uint64 {
	info := h.nodeHostInfoWithLogs()
	if info == nil {
		return nil
	}
	var out []uint64
	for _, li := range info.LogInfo {
		out = append(out, li.ShardID)
	}
	return out
}

func (h *Host) nodeHostInfoWithLogs() *dragonboat.NodeHostInfo {
	h.nhMu.RLock()
	defer h.nhMu.RUnlock()
	if h.nhClosed {
		return nil
	}
	return h.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{})
}

// MirrorsApplied returns the index each mirror of this host applied, by
// group name, for the benchmark.
func (h *Host) MirrorsApplied() map[string]uint64 {
	out := map[string]uint64{}
	if p := h.mirrors.Load(); p != nil {
		for name, m := range *p {
			out[name] = m.AppliedIndex.Load()
		}
	}
	return out
}

// TestingSubscribe opens a mirror's subscription to group name on the
// replica at addr, as a mirror of this host would, and returns the index
// of the snapshot it got, or the refusal: for tests of the serving side.
func (h *Host) TestingSubscribe(ctx context.Context, addr, name string) (uint64, error) {
	if h.calls == nil {
		return 0, errors.New("no calls")
	}
	c, err := h.calls.DialCall(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	sub := wire.Msg{Kind: wire.KindSubscribe, Shard: GroupShardID(name), Name: name}
	if err := c.Send(sub.Encode(nil)); err != nil {
		return 0, err
	}
	b, err := c.Recv()
	if err != nil {
		return 0, err
	}
	m, err := wire.Decode(b)
	switch {
	case err != nil:
		return 0, err
	case m.Kind == wire.KindRefuse:
		return 0, fmt.Errorf("refused (code %d): %s", m.Code, m.Text)
	case m.Kind != wire.KindSnapshot:
		return 0, fmt.Errorf("kind %d", m.Kind)
	}
	return m.Index, nil
}

// TestingExport asks the replica at addr to export group name (a group of
// Config.Groups) into dir, as a backup on this host would, and returns the
// index of the copy it got, or why not: for tests of the serving side.
func (h *Host) TestingExport(ctx context.Context, addr, name, dir string) (uint64, error) {
	if h.calls == nil {
		return 0, errors.New("no calls")
	}
	ex, err := h.exportFrom(ctx, exportTarget{name: name, shard: GroupShardID(name)}, addr, dir)
	return ex.Snapshot.Index, err
}

// TestingStateParts makes replicas send a mirror's state in parts of part
// bytes once it is larger than whole bytes, until restore is called: a test
// mirrors a state in parts without making one larger than a call message.
// Production code never calls it.
func TestingStateParts(whole, part int) (restore func()) { return serve.TestingStateParts(whole, part) }

// TestingStateSends sets how many states larger than one message a replica
// sends to mirrors at once, until restore is called. Production code never
// calls it.
func TestingStateSends(most int32) (restore func()) { return serve.TestingStateSends(most) }

// TestingMirrorsRunning returns how many mirrors started on this host are
// still running, whether the host lists them or not. Production code never
// calls it.
func (h *Host) TestingMirrorsRunning() int { return int(h.mirrorsRunning.Load()) }

// TestingRunning reports whether this host runs a shard of group name,
// caught up or not. Production code never calls it.
func (h *Host) TestingRunning(name string) bool { return h.running(name) != nil }
