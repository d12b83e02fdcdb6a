package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/transport"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// group is a fencelock group of replicas talking over one fault network.
type group struct {
	t       *testing.T
	net     *transport.Network
	members map[uint64]string
	dir     string
	nodes   map[uint64]*fencelock.Node
	tune    func(*fencelock.Config)
}

func newGroup(t *testing.T, size int, tune func(*fencelock.Config)) *group {
	g := &group{t: t, net: transport.NewNetwork(1), members: map[uint64]string{},
		dir: t.TempDir(), nodes: map[uint64]*fencelock.Node{}, tune: tune}
	for id := uint64(1); id <= uint64(size); id++ {
		g.members[id] = g.net.Addr(id)
	}
	t.Cleanup(func() {
		for id := range g.nodes {
			g.stop(id)
		}
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs error
	for id := range g.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := fencelock.Start(context.Background(), g.config(id))
			mu.Lock()
			defer mu.Unlock()
			errs = errors.Join(errs, err)
			if n != nil {
				g.nodes[id] = n
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errs)
	return g
}

func (g *group) config(id uint64) fencelock.Config {
	cfg := fencelock.Config{ReplicaID: id, Members: g.members, Dir: filepath.Join(g.dir, fmt.Sprint(id)),
		Transport: g.net, Logger: quiet, SessionTTL: 2 * time.Second}
	if g.tune != nil {
		g.tune(&cfg)
	}
	return cfg
}

func (g *group) start(id uint64) *fencelock.Node {
	n, err := fencelock.Start(context.Background(), g.config(id))
	require.NoError(g.t, err)
	g.nodes[id] = n
	return n
}

func (g *group) stop(id uint64) {
	if n := g.nodes[id]; n != nil {
		n.Close()
		delete(g.nodes, id)
	}
}

// leader waits until the replicas in ids agree on a leader among them.
func (g *group) leader(ctx context.Context, ids ...uint64) uint64 {
	g.t.Helper()
	for {
		var leader uint64
		agree := true
		for _, id := range ids {
			st := g.nodes[id].Status()
			if leader == 0 {
				leader = st.LeaderID
			}
			agree = agree && st.LeaderID != 0 && st.LeaderID == leader
		}
		if agree && leader != 0 {
			for _, id := range ids {
				if id == leader {
					return leader
				}
			}
		}
		select {
		case <-ctx.Done():
			g.t.Fatalf("no leader among %v", ids)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func others(size int, not uint64) []uint64 {
	var ids []uint64
	for id := uint64(1); id <= uint64(size); id++ {
		if id != not {
			ids = append(ids, id)
		}
	}
	return ids
}

// An isolated leader loses its group: the others elect a new leader and
// grant; the isolated side grants nothing; after healing it follows again.
func TestIsolatedLeaderIsReplaced(t *testing.T) {
	g := newGroup(t, 3, nil)
	ctx := testCtx(t)
	old := g.leader(ctx, 1, 2, 3)
	rest := others(3, old)
	cutOff, err := g.nodes[old].NewSession(ctx, fencelock.WithTTL(5*time.Second))
	require.NoError(t, err)

	g.net.Isolate(g.members[old])
	newLeader := g.leader(ctx, rest...)
	require.NotEqual(t, old, newLeader)
	s, err := g.nodes[rest[0]].NewSession(ctx)
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "x")
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = cutOff.Acquire(short, "y")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable, "the isolated side cannot grant")
	require.Greater(t, g.net.Stats(g.members[old]).MessagesDropped, uint64(0))

	g.net.Heal()
	require.Equal(t, newLeader, g.leader(ctx, 1, 2, 3))
	info, err := g.nodes[old].Inspect(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, l.Token(), info.Token, "the healed replica serves the majority's state")
	l2, err := cutOff.Acquire(ctx, "y")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
}

// Partition puts the leader in a minority: the majority side elects its own
// leader and grants; the minority side grants nothing.
func TestPartitionMinorityRefuses(t *testing.T) {
	g := newGroup(t, 5, nil)
	ctx := testCtx(t)
	leader := g.leader(ctx, 1, 2, 3, 4, 5)
	rest := others(5, leader)
	minority := []uint64{leader, rest[0]}
	majority := rest[1:]
	addrs := func(ids []uint64) []string {
		var out []string
		for _, id := range ids {
			out = append(out, g.members[id])
		}
		return out
	}
	minSession, err := g.nodes[rest[0]].NewSession(ctx, fencelock.WithTTL(5*time.Second))
	require.NoError(t, err)

	g.net.Partition(addrs(minority), addrs(majority))
	g.leader(ctx, majority...)
	s, err := g.nodes[majority[0]].NewSession(ctx)
	require.NoError(t, err)
	_, err = s.Acquire(ctx, "m")
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = minSession.TryAcquire(short, "n")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable)

	g.net.Heal()
	g.leader(ctx, 1, 2, 3, 4, 5)
	_, err = minSession.TryAcquire(ctx, "n")
	require.NoError(t, err)
}

// A one-way cut from a follower to everyone else: the follower still hears
// the leader but cannot answer, so its own proposals cannot commit; the
// group keeps going without it.
func TestOneWayCut(t *testing.T) {
	g := newGroup(t, 3, nil)
	ctx := testCtx(t)
	leader := g.leader(ctx, 1, 2, 3)
	f := others(3, leader)
	mute, err := g.nodes[f[0]].NewSession(ctx, fencelock.WithTTL(5*time.Second))
	require.NoError(t, err)
	for _, to := range []uint64{leader, f[1]} {
		g.net.Cut(g.members[f[0]], g.members[to])
	}
	before := g.net.Stats(g.members[f[0]]).Messages
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = mute.TryAcquire(short, "a")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
	require.Greater(t, g.net.Stats(g.members[f[0]]).Messages, before, "the other direction still carries messages")

	s, err := g.nodes[f[1]].NewSession(ctx)
	require.NoError(t, err)
	_, err = s.TryAcquire(ctx, "b")
	require.NoError(t, err)
	g.net.Heal()
	_, err = mute.TryAcquire(ctx, "a")
	require.NoError(t, err)
}

// Lossy and slow links: every call still completes (retries hide the
// losses), and the messages really were lost and delayed.
func TestLossyAndSlowLinks(t *testing.T) {
	g := newGroup(t, 3, nil)
	ctx := testCtx(t)
	g.leader(ctx, 1, 2, 3)
	const delay = 20 * time.Millisecond
	// A lost message costs a proposal its whole attempt (ProposalTimeout),
	// so the TTL leaves room for a few in a row.
	g.net.SetAll(transport.LinkFault{Drop: 0.1, Delay: delay, Jitter: 10 * time.Millisecond})
	s, err := g.nodes[1].NewSession(ctx, fencelock.WithTTL(10*time.Second))
	require.NoError(t, err)
	var last uint64
	for range 10 {
		start := time.Now()
		l, err := s.Acquire(ctx, "lossy")
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 2*delay, "a commit takes a round trip over slow links")
		require.Greater(t, l.Token(), last)
		last = l.Token()
		require.NoError(t, l.Release(ctx))
	}
	var dropped uint64
	for _, addr := range g.members {
		dropped += g.net.Stats(addr).MessagesDropped
	}
	require.Greater(t, dropped, uint64(0))
}

// A follower cut off while the log is compacted past it catches up from a
// snapshot carried by the network once the link heals.
func TestSnapshotCatchUpAfterHeal(t *testing.T) {
	g := newGroup(t, 3, func(c *fencelock.Config) { c.SnapshotEntries, c.CompactionOverhead = 20, 5 })
	ctx := testCtx(t)
	leader := g.leader(ctx, 1, 2, 3)
	f := others(3, leader)
	lagging := g.members[f[0]]
	g.net.Isolate(lagging)
	s, err := g.nodes[f[1]].NewSession(ctx)
	require.NoError(t, err)
	var held *fencelock.Lock
	for i := range 60 {
		l, err := s.Acquire(ctx, "k")
		require.NoError(t, err)
		if i == 59 {
			held = l
			break
		}
		require.NoError(t, l.Release(ctx))
	}
	require.Zero(t, g.net.Stats(lagging).Chunks)
	g.net.Heal()
	info, err := g.nodes[f[0]].Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, held.Token(), info.Token)
	require.Greater(t, g.net.Stats(lagging).Chunks, uint64(0), "it caught up from a snapshot")
}

func TestAddrsAndConfigure(t *testing.T) {
	net := transport.NewNetwork(7)
	require.NotEqual(t, net.Addr(1), transport.NewNetwork(7).Addr(1), "addresses are unique in the process")
	require.Equal(t, net.Addr(1), net.Addr(1), "a restarted replica gets its address back")
	require.NotEqual(t, net.Addr(1), net.Addr(2))
	for _, cfg := range []fencelock.Config{
		{ReplicaID: 1, Members: map[uint64]string{1: "has space:1"}},
		{ReplicaID: 1, Members: map[uint64]string{1: net.Addr(1)}, ListenAddr: "0.0.0.0:7001"},
	} {
		cfg.Dir, cfg.Transport, cfg.Logger = t.TempDir(), net, quiet
		_, err := fencelock.Start(context.Background(), cfg)
		require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	}
}
