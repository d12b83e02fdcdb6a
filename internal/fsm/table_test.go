package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The lock table against a map, through random adds and removes over few
// names, so that probe runs are long, wrap around the end and shift back.
func TestLockTable(t *testing.T) {
	for _, size := range []int{0, 1, 5, 100} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(size), 1))
			tab := new(lockTable)
			if size > 0 {
				tab = newLockTable(size)
			}
			want := map[string]*lock{}
			names := make([]string, 64)
			for i := range names {
				names[i] = fmt.Sprintf("n/%d", i)
			}
			for step := range 20_000 {
				name := names[rng.IntN(len(names))]
				if rng.IntN(2) == 0 {
					l := &lock{name: name}
					_, had := want[name]
					if got := tab.add(l); got == had {
						t.Fatalf("step %d: add(%q) = %v, had %v", step, name, got, had)
					}
					if !had {
						want[name] = l
					}
				} else {
					tab.remove(name)
					delete(want, name)
				}
				if tab.len() != len(want) {
					t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(want))
				}
				for _, n := range names {
					if got := tab.get(n); got != want[n] {
						t.Fatalf("step %d: get(%q) = %p, want %p", step, n, got, want[n])
					}
				}
				seen := 0
				for l := range tab.all {
					if want[l.name] != l {
						t.Fatalf("step %d: all yields %q, not in the table", step, l.name)
					}
					seen++
				}
				if seen != len(want) {
					t.Fatalf("step %d: all yields %d, want %d", step, seen, len(want))
				}
				if len(tab.slots) > 0 && tab.n*lockTableLoadDen > len(tab.slots)*lockTableLoadNum {
					t.Fatalf("step %d: %d locks in %d slots", step, tab.n, len(tab.slots))
				}
			}
		})
	}
	var empty lockTable
	empty.remove("x")
	if empty.get("x") != nil || empty.len() != 0 {
		t.Fatal("the zero table is not empty")
	}
}
