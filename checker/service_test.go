package checker

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// runService runs the service scenario (service.go) and fails t on every
// violation, timed-out check, or a run that did not do what it says.
func runService(t *testing.T, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := RunService(ctx, seed, t.TempDir())
	if err != nil {
		for _, v := range r.Violations {
			t.Errorf("service: %s", v)
		}
		t.Fatalf("service: %v", err)
	}
	fmt.Println(r.Line())
	for _, note := range r.Notes {
		t.Logf("service: %s", note)
	}
	t.Logf("service: faults %v; %d grants (%d to the split client), %d calls held by freezes, %d of the split client's answered after one, %d late writes refused; %d grants ended by their lease before the next grant, the least slack %v",
		r.Faults, r.Grants, r.SplitGrants, r.Held, r.HeldAnswers, r.Refused, r.Lapsed, r.MinSlack)
	for _, v := range r.Violations {
		t.Errorf("service: %s", v)
	}
	for _, to := range r.TimedOut {
		t.Errorf("service: %s", to)
	}
	if len(r.Faults) != len(svcFaults) {
		t.Errorf("service: %d of %d faults applied", len(r.Faults), len(svcFaults))
	}
	if r.SplitGrants == 0 || r.HeldAnswers == 0 {
		t.Errorf("service: %d grants to the split client, %d of its calls answered after a freeze held them: the workload did not run", r.SplitGrants, r.HeldAnswers)
	}
}
