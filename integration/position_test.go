package integration_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// positions records the places a waiting call reported.
type positions struct {
	mu  sync.Mutex
	got []int
	ch  chan int
}

func newPositions() *positions { return &positions{ch: make(chan int, 16)} }

func (p *positions) report(pos int) {
	p.mu.Lock()
	p.got = append(p.got, pos)
	p.mu.Unlock()
	p.ch <- pos
}

func (p *positions) all() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.got...)
}

// await waits until the call reports pos.
func (p *positions) await(t *testing.T, ctx context.Context, pos int) {
	t.Helper()
	for {
		select {
		case got := <-p.ch:
			if got == pos {
				return
			}
		case <-ctx.Done():
			t.Fatalf("position %d never reported; got %v", pos, p.all())
		}
	}
}

// Waiting calls on three replicas report their places as the queue moves:
// when the head gives up, when the holder releases; a call granted at once
// reports nothing, and Inspect lists the queue in the same order.
func TestQueuePositions(t *testing.T) {
	c, ctx := newCluster(t, 3)
	holder := newSession(t, ctx, c.Node(1))
	l, err := holder.Acquire(ctx, "q", fencelock.WithQueuePosition(func(int) { t.Error("a grant at once reported a position") }))
	require.NoError(t, err)

	type call struct {
		s      *fencelock.Session
		pos    *positions
		cancel context.CancelFunc
		lock   chan *fencelock.Lock
	}
	calls := make([]*call, 3)
	for i := range calls {
		cctx, cancel := context.WithCancel(ctx)
		cl := &call{s: newSession(t, ctx, c.Node(uint64(1+i))), pos: newPositions(), cancel: cancel, lock: make(chan *fencelock.Lock, 1)}
		calls[i] = cl
		go func() {
			l, err := cl.s.Acquire(cctx, "q", fencelock.WithQueuePosition(cl.pos.report))
			if err != nil {
				l = nil
			}
			cl.lock <- l
		}()
		cl.pos.await(t, ctx, i+1)
	}
	info := inspect(t, ctx, c.Node(2), "q")
	require.Equal(t, []uint64{calls[0].s.ID(), calls[1].s.ID(), calls[2].s.ID()}, info.Queue)

	calls[0].cancel() // the head gives up
	require.Nil(t, <-calls[0].lock)
	calls[1].pos.await(t, ctx, 1)
	calls[2].pos.await(t, ctx, 2)

	require.NoError(t, l.Release(ctx))
	next := <-calls[1].lock
	require.NotNil(t, next)
	calls[2].pos.await(t, ctx, 1)
	require.NoError(t, next.Release(ctx))
	last := <-calls[2].lock
	require.NotNil(t, last)
	require.NoError(t, last.Release(ctx))

	require.Equal(t, []int{1}, calls[0].pos.all())
	require.Equal(t, []int{2, 1}, calls[1].pos.all())
	require.Equal(t, []int{3, 2, 1}, calls[2].pos.all(), "each change once, in order")
}

// Candidates report their places too.
func TestCampaignQueuePosition(t *testing.T) {
	c, ctx := newCluster(t, 1)
	lead, err := newSession(t, ctx, c.Node(1)).Campaign(ctx, "e", "a")
	require.NoError(t, err)
	pos := newPositions()
	elected := make(chan *fencelock.Leadership, 1)
	go func() {
		l, err := newSession(t, ctx, c.Node(1)).Campaign(ctx, "e", "b", fencelock.WithQueuePosition(pos.report))
		if err != nil {
			l = nil
		}
		elected <- l
	}()
	pos.await(t, ctx, 1)
	require.NoError(t, lead.Resign(ctx))
	l := <-elected
	require.NotNil(t, l)
	require.Equal(t, []int{1}, pos.all())
}
