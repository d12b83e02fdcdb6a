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
	res, err := def.Read(ctx, func(st *fsm.State) any {
		groups, set := st.GroupTable()
		return View{Set: set, Groups: groups}
	})
	if err != nil {
		return View{}, err
	}
	return res.(View), nil
}
