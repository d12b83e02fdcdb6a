package grouptable

import (
	"context"
	"slices"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// View is the table as one linearizable read found it.
type View struct {
	Set    bool
	Groups []fsm.GroupEntry
}

// Find returns the table's entry of group name, if it has one.
func (v *View) Find(name string) (fsm.GroupEntry, bool) {
	i := slices.IndexFunc(v.Groups, func(e fsm.GroupEntry) bool { return e.Name == name })
	if i < 0 {
		return fsm.GroupEntry{}, false
	}
	return v.Groups[i], true
}

// Read reads the table linearizably at def, the default group's shard.
func Read(ctx context.Context, def *shard.Shard) (View, error) {
	return read(ctx, def, func(st *fsm.State) View {
		groups, set := st.GroupTable()
		return View{Set: set, Groups: groups}
	})
}

// read answers q of r's state as a linearizable read finds it.
func read[T any](ctx context.Context, r *shard.Shard, q func(st *fsm.State) T) (T, error) {
	v, err := r.Read(ctx, func(st *fsm.State) any { return q(st) })
	if err != nil {
		var none T
		return none, err
	}
	return v.(T), nil
}
