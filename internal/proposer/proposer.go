// Package proposer packs concurrent commands into raft entries.
//
// Callers hand in one command each; a single loop takes every command that is
// waiting, encodes them as one entry and proposes it asynchronously, keeping a
// few entries in flight. Under load, commands that arrive while earlier
// entries are in flight share the next entry, so one raft commit and one
// fsync serve many callers; alone, a command is proposed at once.
package proposer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
)

// ErrLeaderChanged fails the commands of entries in flight when the raft
// leader changes: a proposal forwarded to a deposed leader may never complete,
// and waiting for its timeout would stall the caller. The outcome is unknown,
// so the caller retries; the state machine applies each command at most once.
var ErrLeaderChanged = errors.New("raft leader changed")

// ErrClosed is returned once the proposer is closed.
var ErrClosed = errors.New("proposer closed")

// ProposeFunc starts one asynchronous raft proposal (NodeHost.Propose with a
// no-op client session).
type ProposeFunc func(cmd []byte, timeout time.Duration) (*dragonboat.RequestState, error)

// Config sizes a proposer.
type Config struct {
	Timeout  time.Duration // per entry
	MaxBatch int           // commands per entry
	InFlight int           // entries in flight
	// Gate returns the versions the group writes (fsm.State.Gate as
	// applied locally): every entry is written at its log version. nil:
	// this build's newest (tests of the proposer alone).
	Gate func() fsm.Gate
}

// Proposer batches commands into entries.
type Proposer struct {
	propose ProposeFunc
	cfg     Config
	in      chan *call
	slots   chan struct{}
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup

	mu      sync.Mutex
	abandon chan struct{} // closed on a leader change
}

type call struct {
	cmd  fsm.Command
	done chan struct{}
	res  fsm.Result
	err  error
}

// New starts a proposer.
func New(propose ProposeFunc, cfg Config) *Proposer {
	cfg.MaxBatch = min(max(cfg.MaxBatch, 1), fsm.MaxBatch)
	cfg.InFlight = max(cfg.InFlight, 1)
	p := &Proposer{
		propose: propose,
		cfg:     cfg,
		in:      make(chan *call, cfg.MaxBatch),
		slots:   make(chan struct{}, cfg.InFlight),
		stop:    make(chan struct{}),
		abandon: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

// Propose makes one attempt to apply cmd and returns its result. An error
// means the outcome is unknown unless it says otherwise: the command may
// still be applied.
func (p *Proposer) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	c := &call{cmd: cmd, done: make(chan struct{})}
	select {
	case p.in <- c:
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	case <-p.stop:
		return fsm.Result{}, ErrClosed
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return fsm.Result{}, ctx.Err()
	case <-p.stop:
		return fsm.Result{}, ErrClosed
	}
}

// LeaderChanged fails the entries in flight with ErrLeaderChanged.
func (p *Proposer) LeaderChanged() {
	p.mu.Lock()
	close(p.abandon)
	p.abandon = make(chan struct{})
	p.mu.Unlock()
}

// Close stops the loop and fails the calls still waiting with ErrClosed;
// their commands may or may not be applied. It is idempotent.
func (p *Proposer) Close() {
	p.stopped.Do(func() { close(p.stop) })
	p.wg.Wait()
}

func (p *Proposer) loop() {
	defer p.wg.Done()
	for {
		var first *call
		select {
		case first = <-p.in:
		case <-p.stop:
			return
		}
		batch := p.gather([]*call{first})
		select {
		case p.slots <- struct{}{}:
		case <-p.stop:
			finish(batch, nil, ErrClosed)
			return
		}
		batch = p.gather(batch) // what arrived while every slot was busy
		cmds := make([]fsm.Command, len(batch))
		for i, c := range batch {
			cmds[i] = c.cmd
		}
		p.mu.Lock()
		abandon := p.abandon
		p.mu.Unlock()
		// Each entry carries the proposer's time once, for the grant and queue
		// times the state records (Holder.GrantedAt); the state machine only
		// stores it, so a clock that jumps skews a view, never a decision.
		gate := fsm.Reads()
		if p.cfg.Gate != nil {
			gate = p.cfg.Gate()
		}
		// A command the gate does not allow fails its batch: the replica
		// refuses such commands before they get here (ErrVersionGated),
		// so only a gate the state lowered could (and it never falls).
		entry, err := fsm.AppendEntry(nil, gate, uint64(time.Now().UnixNano()), cmds)
		if err != nil {
			<-p.slots
			finish(batch, nil, err)
			continue
		}
		rs, err := p.propose(entry, p.cfg.Timeout)
		if err != nil {
			<-p.slots
			finish(batch, nil, err)
			continue
		}
		p.wg.Add(1)
		go p.await(rs, batch, abandon)
	}
}

func (p *Proposer) gather(batch []*call) []*call {
	for len(batch) < p.cfg.MaxBatch {
		select {
		case c := <-p.in:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

func (p *Proposer) await(rs *dragonboat.RequestState, batch []*call, abandon chan struct{}) {
	defer p.wg.Done()
	var r dragonboat.RequestResult
	select {
	case r = <-rs.ResultC():
	case <-abandon:
		<-p.slots
		finish(batch, nil, ErrLeaderChanged)
		return
	case <-p.stop:
		finish(batch, nil, ErrClosed)
		return
	}
	<-p.slots
	if !r.Completed() {
		finish(batch, nil, resultError(r))
		return
	}
	data := r.GetResult().Data
	rs.Release()
	results, err := fsm.DecodeResults(data, make([]fsm.Result, 0, len(batch)))
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("%w: %d results for %d commands", fsm.ErrCorrupt, len(results), len(batch))
	}
	finish(batch, results, err)
}

func resultError(r dragonboat.RequestResult) error {
	switch {
	case r.Timeout():
		return dragonboat.ErrTimeout
	case r.Dropped():
		return dragonboat.ErrShardNotReady
	case r.Terminated():
		return dragonboat.ErrShardClosed
	case r.Rejected():
		return dragonboat.ErrRejected
	case r.Aborted():
		return dragonboat.ErrAborted
	}
	return fmt.Errorf("unexpected request result %v", r)
}

func finish(batch []*call, results []fsm.Result, err error) {
	for i, c := range batch {
		if err == nil {
			c.res = results[i]
		}
		c.err = err
		close(c.done)
	}
}
