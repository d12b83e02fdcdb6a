package serve

// A backup's export of a group (internal/replica's exportgroup.go is the
// caller's side): a replica that runs the group writes a copy of it with
// Group.Export, as a backup of a local group does, and sends it down the call connection the export
// request came on, in messages of at most wire.MaxExportData bytes (a group's
// state may be far larger than one call message). The request is the one
// message the caller sends: anything more, or the connection's end, stops
// the export. The copy is written in a temporary directory under Dir that
// is removed before the connection ends.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/transport"
)

const (
	// exportWait bounds an export whose request names no deadline.
	exportWait = 10 * time.Minute
	// maxExports bounds the exports a replica serves at once: each writes
	// a copy of a group to its disk and holds a call connection, and
	// backups taken on many replicas at once, or a caller that retries
	// without end, must not fill the disk or starve the group's own work.
	// A refused caller asks another voter.
	maxExports = 2
)

// serveExport answers export request m on c: the group's copy, or a
// refusal saying why not (wire.CodeElsewhere if this replica does not run it).
func (s *Server) serveExport(peer peering.Hello, c transport.CallConn, m wire.Msg) {
	g, release := s.takeGroup(c, m, &s.exporting, maxExports, fmt.Sprintf("writing %d copies of groups for other replicas' backups", maxExports))
	if g == nil {
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(g.Context(), callWait(exportWait, m.Timeout))
	defer cancel()
	// The caller sends nothing more; its close (it has the whole copy, or
	// gave up) ends the export.
	gone := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.Close()
	c.SetIdle(0)
	wg.Go(func() {
		defer close(gone)
		defer cancel()
		_, _ = c.Recv()
	})

	tmp, err := os.MkdirTemp(s.cfg.Dir, ".snapshot-export-")
	if err != nil {
		refuseCall(c, wire.CodeUnavailable, fmt.Sprintf("replica %d cannot export group %q: %v", s.cfg.ReplicaID, g.Name(), err))
		return
	}
	defer os.RemoveAll(tmp)
	type result struct {
		ex  Copy
		err error
	}
	done := make(chan result, 1)
	go func() {
		ex, err := g.Export(ctx, tmp)
		done <- result{ex, err}
	}()
	// Pings keep the caller's idle limit from ending a long export.
	t := time.NewTicker(wire.PingEvery)
	defer t.Stop()
	var res result
	for waiting := true; waiting; {
		select {
		case res = <-done:
			waiting = false
		case <-t.C:
			ping := wire.Msg{Kind: wire.KindPing, Leader: g.Leader()}
			if c.Send(ping.Encode(nil)) != nil {
				cancel()
			}
		}
	}
	if res.err != nil {
		refuseCall(c, s.host.Code(res.err), fmt.Sprintf("replica %d cannot export group %q: %v", s.cfg.ReplicaID, g.Name(), res.err))
		return
	}
	ex := res.ex
	head := wire.Msg{Kind: wire.KindExportHead, Index: ex.Index, Data: ex.Meta,
		Sessions: uint64(ex.Sessions), Locks: uint64(ex.Locks), Elections: uint64(ex.Elections)}
	if err := c.Send(head.Encode(nil)); err != nil {
		return
	}
	if err := SendFile(c, ex.File, ex.Size); err != nil {
		g.Logger().Warn("fencelock: a backup's export of the group ended early", "for", peer.Replica, "err", err)
		return
	}
	_ = os.RemoveAll(tmp) // sent: no need to keep it while the caller finishes
	g.Logger().Info("fencelock: exported the group for another replica's backup", "for", peer.Replica, "index", ex.Index, "bytes", ex.Size)
	// The caller closes once it has it all.
	select {
	case <-gone:
	case <-time.After(wire.IdleAfter):
	}
}

// SendFile sends the size bytes of file down c as exportData messages
// (wire.SendParts), after the exportHead that names its size; the
// caller's side (internal/replica's recvFile) takes exactly that many.
func SendFile(c transport.CallConn, file string, size uint64) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	err = wire.SendParts(c, f, size, wire.MaxExportData, func(data []byte) wire.Msg {
		return wire.Msg{Kind: wire.KindExportData, Data: data}
	})
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}
