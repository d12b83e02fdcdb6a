package checker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// runRestore runs the restore scenario (RunRestore) as TestScenarios'
// subtest "restore": a violation of its checks fails it, and so does a run
// that did not do what the scenario is for (RunRestore's error).
func runRestore(t *testing.T, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := RunRestore(ctx, seed, t.TempDir())
	if err != nil {
		r.Name, r.Seed = "restore", seed
	}
	publishRun(t, r, err)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	fmt.Println(r.Line())
	t.Logf("restore: %d grants, %d late writes refused; restored grants by group: %v", r.Grants, r.Refused, r.ByGroup)
	for _, note := range r.Notes {
		t.Logf("restore: %s", note)
	}
	for _, v := range r.Violations {
		t.Errorf("restore: %s", v)
	}
}

// TestRestoreChecks feeds the restore scenario's checks what a run records,
// once as a restore that raised the epoch leaves it and once as one that
// kept the backup's token base (restored tokens counting on from the
// backup's, among the old deployment's later ones): the first passes, the
// second fails each check by name.
func TestRestoreChecks(t *testing.T) {
	const group = 0x77
	fence := func(token uint64) fencelock.Fence { return fencelock.Fence{Group: group, Token: token} }
	old := map[grantKey]uint64{{"a", 100 << 16}: 100, {"a", 120 << 16}: 120, {"a", 130 << 16}: 130}
	oldGrants := []restoreGrant{{dep: oldDeployment, client: 0, name: "r@a", fence: fence(120 << 16), afterBackup: true}}
	ids := map[string]uint64{"a": group}

	raised := uint64(1) << fsm.EpochShift
	admitted := map[string][]restoreWrite{"r@a": {
		{dep: oldDeployment, client: 0, fence: fence(100 << 16)},
		{dep: restoredDeployment, client: 6, fence: fence(raised + 1)},
	}}
	refused := map[string][]restoreWrite{"r@a": {
		{dep: oldDeployment, client: 0, fence: fence(130 << 16), late: true, frozen: true, mark: raised + 1},
	}}
	restored := map[grantKey]uint64{{"a", raised + 1}: 101}
	grants := append(slices.Clone(oldGrants), restoreGrant{dep: restoredDeployment, client: 6, name: "r@a", fence: fence(raised + 1)})
	if v := restoreViolations(admitted, refused, old, restored, grants, ids); len(v) != 0 {
		t.Errorf("a restore that raised the epoch: %q", v)
	}

	// Kept the base: the restored group grants 110<<16 and 120<<16 again
	// (under another group ID, too), and the old holders' late writes land.
	admitted = map[string][]restoreWrite{"r@a": {
		{dep: oldDeployment, client: 0, fence: fence(100 << 16)},
		{dep: restoredDeployment, client: 6, fence: fence(110 << 16)},
		{dep: oldDeployment, client: 0, fence: fence(120 << 16), late: true},
		{dep: oldDeployment, client: 0, fence: fence(130 << 16), late: true, frozen: true},
	}}
	refused = map[string][]restoreWrite{"r@a": {
		{dep: restoredDeployment, client: 7, fence: fence(120 << 16), mark: 130 << 16},
	}}
	restored = map[grantKey]uint64{{"a", 110 << 16}: 110, {"a", 120 << 16}: 120}
	grants = append(slices.Clone(oldGrants), restoreGrant{dep: restoredDeployment, client: 6, name: "r@a",
		fence: fencelock.Fence{Group: group + 1, Token: 110 << 16}})
	v := restoreViolations(admitted, refused, old, restored, grants, ids)
	for _, check := range []string{"late-write admitted", "restored holder refused", "fence granted twice", "restored fence not above", "group ID changed"} {
		n := 0
		for _, s := range v {
			if strings.HasPrefix(s, check+":") {
				n++
			}
		}
		want := 1
		if check == "late-write admitted" {
			want = 2
		}
		if n != want {
			t.Errorf("a restore that kept the token base: %d %q violations, want %d; all: %q", n, check, want, v)
		}
	}
}
