package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Seven named groups (and the default one) on three replicas: within 10 s
// each replica leads at most ⌈8/3⌉ = 3 of them, and again after one
// replica restarts.
func TestGroupsLeadersSpread(t *testing.T) {
	var groups []fencelock.GroupConfig
	for i := range 7 {
		groups = append(groups, fencelock.GroupConfig{Name: fmt.Sprintf("g%d", i), Voters: []uint64{1, 2, 3}})
	}
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithConfig(withGroups(groups...)))
	spread := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		waitStatus(t, ctx, c, what, func(_ uint64, _ fencelock.Status) bool {
			led := map[uint64]int{}
			for _, n := range running(c) {
				st := n.Status()
				if len(st.Groups) != 8 || !allLeaders(st) {
					return false
				}
				for _, g := range st.Groups {
					if g.IsLeader {
						led[st.ReplicaID]++
					}
				}
			}
			total := 0
			for _, k := range led {
				if k > 3 {
					return false
				}
				total += k
			}
			return total == 8
		})
		t.Logf("%s: leaders spread in %v", what, time.Since(start).Round(time.Millisecond))
	}
	spread("after start")
	c.Stop(2)
	c.Restart(2)
	spread("after replica 2 restarted")
}
