package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/lockapi"
)

// ExportSnapshot has Dragonboat export a snapshot of the group's state
// into dir (which must exist and be empty), retried like Propose while
// another snapshot of the group is being written, until ctx ends; it
// returns the snapshot's index. The host's backup checks what it wrote.
func (r *Shard) ExportSnapshot(ctx context.Context, dir string) (uint64, error) {
	var err error
	var index uint64
	for b := newBackoff(r.cfg.RTT); ; {
		if err := r.check(ctx, err); err != nil {
			return 0, err
		}
		// Dragonboat needs a deadline; the snapshot of a large table takes
		// as long as writing it does.
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			sctx, cancel = context.WithTimeout(ctx, 10*time.Minute)
		}
		index, err = r.nh.SyncRequestSnapshot(sctx, r.ShardID(), dragonboat.SnapshotOption{ExportPath: dir, Exported: true})
		cancel()
		if err == nil {
			break
		}
		// Busy: another snapshot of the group is being written.
		if !retryable(err) && !errors.Is(err, dragonboat.ErrRejected) {
			return 0, fmt.Errorf("%w: export a snapshot of group %q: %s", lockapi.ErrUnavailable, r.Name(), Describe(err))
		}
		b.wait(ctx, r.Done(), nil)
	}
	return index, nil
}
