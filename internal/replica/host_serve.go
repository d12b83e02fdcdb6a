package replica

// The host's side of the calls it serves for replicas that do not run a
// group (package serve: a mirror's subscription, a backup's export, a
// membership read): its answers to what serve.Host and serve.Group name,
// through servedHost and servedShard, and what an error means to the
// caller (wireCode).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencelock/fencelock/internal/backup"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/serve"
	"github.com/fencelock/fencelock/internal/replica/shard"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/transport"
)

// newServer returns h's serve.Server.
func newServer(h *Host) *serve.Server {
	return serve.New(serve.Config{ReplicaID: h.cfg.ReplicaID, Dir: h.cfg.Dir, ProposalTimeout: h.cfg.ProposalTimeout}, servedHost{h})
}

// ServeCall implements transport.CallHandler: package serve answers it.
func (p *peers) ServeCall(peer peering.Hello, c transport.CallConn) { p.h.server.ServeCall(peer, c) }

// servedHost is h as package serve reaches it (serve.Host).
type servedHost struct{ h *Host }

func (s servedHost) Down() bool { return s.h.down.Load() }

func (s servedHost) Running(name string, shard uint64) serve.Group {
	r := s.h.running(name)
	if r == nil || r.ShardID() != shard {
		return nil
	}
	return servedShard{r}
}

func (servedHost) Code(err error) byte { return wireCode(err) }

// wireCode is the code a mirror, or another replica's call, acts on for
// err.
func wireCode(err error) byte {
	switch {
	case errors.Is(err, ErrNoQuorum):
		return wire.CodeNoQuorum
	case errors.Is(err, fsm.ErrVersionGated):
		return wire.CodeGated
	case errors.Is(err, ErrClosed), errors.Is(err, ErrRemoved), errors.Is(err, ErrGroupMoved),
		errors.Is(err, ErrGroupDropped), errors.Is(err, shard.ErrMovedHere), errors.Is(err, shard.ErrMovedOff):
		return wire.CodeElsewhere
	case errors.Is(err, ErrUnavailable):
		return wire.CodeUnavailable
	}
	return wire.CodeInvalid
}

// servedShard is a shard as package serve reaches it (serve.Group).
type servedShard struct{ r *Replica }

func (s servedShard) Name() string                                    { return s.r.Name() }
func (s servedShard) Logger() *slog.Logger                            { return s.r.Logger() }
func (s servedShard) Context() context.Context                        { return s.r.Context() }
func (s servedShard) Leader() uint64                                  { return s.r.LeaderID.Load() }
func (s servedShard) ElectionTimeout() time.Duration                  { return s.r.ElectionTimeout() }
func (s servedShard) Subscribers() *serve.Subscribers                 { return s.r.Subscribers() }
func (s servedShard) Serving() error                                  { return s.r.Serving() }
func (s servedShard) Members(ctx context.Context) (Membership, error) { return s.r.Members(ctx) }

func (s servedShard) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, uint64, error) {
	res, err := s.r.Propose(ctx, cmd)
	// The entry applied here before Propose returned.
	return res, s.r.AppliedIndex.Load(), err
}

func (s servedShard) ReadIndex(ctx context.Context) (uint64, error) {
	v, err := s.r.Read(ctx, func(st *fsm.State) any { return st.Index() })
	if err != nil {
		return 0, err
	}
	return v.(uint64), nil
}

func (s servedShard) Export(ctx context.Context, dir string) (serve.Copy, error) {
	ex, err := export(ctx, s.r, dir)
	if err != nil {
		return serve.Copy{}, err
	}
	return serve.Copy{Index: ex.Snapshot.Index, Meta: backup.EncodeMetadata(ex.Meta), File: ex.File, Size: ex.Snapshot.FileSize,
		Sessions: ex.Sessions, Locks: ex.Locks, Elections: ex.Elections}, nil
}

// State takes the group's state and its applied index, and runs add, in
// one local read of the state machine, which Dragonboat serialises with
// its updates: no entry is applied in between.
func (s servedShard) State(add func()) (uint64, []byte, error) {
	r := s.r
	type snap struct {
		index uint64
		state []byte
		err   error
	}
	// A stop in flight destroys the state machine: LocalRead fails then.
	v, _, err := r.LocalRead(fsm.Query(func(st *fsm.State) any {
		var buf bytes.Buffer
		if err := st.Save(&buf); err != nil {
			return snap{err: err}
		}
		if uint64(buf.Len()) > wire.MaxState {
			return snap{err: fmt.Errorf("the group's state is %d bytes, more than a mirror takes (%d)", buf.Len(), wire.MaxState)}
		}
		add()
		return snap{index: st.Index(), state: buf.Bytes()}
	}))
	if err != nil {
		return 0, nil, err
	}
	sn := v.(snap)
	return sn.index, sn.state, sn.err
}
