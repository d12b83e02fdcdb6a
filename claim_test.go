package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fencelock/fencelock"
)

// Claim the term's epoch at the resource as soon as the leader is elected:
// from then on the resource refuses the previous leader's writes, though the
// new leader has not written anything yet.
func ExampleClaimer() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()
	fences := fencelock.NewFencer() // the resource's; fencesql.Fencer is a durable one

	// lead campaigns and, once elected, claims the term's epoch at the
	// resource before doing anything else.
	lead := func(s *fencelock.Session) *fencelock.Leadership {
		l, err := s.Campaign(ctx, "orders/primary", "replica")
		if err != nil {
			log.Fatal(err)
		}
		if err := fences.Claim(l.Context(ctx), "orders", l.Token()); err != nil {
			log.Fatal(err) // stale: a later term got there first; or this term is over
		}
		return l
	}
	s1, err := node.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s1.Close(ctx)
	s2, err := node.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s2.Close(ctx)

	first := lead(s1)
	if err := first.Resign(ctx); err != nil { // or: its process pauses past its TTL
		log.Fatal(err)
	}
	second := lead(s2)
	fmt.Println("the epoch rose:", second.Token() > first.Token())

	// The first leader's late write, with its epoch: refused, although the
	// second leader has written nothing.
	err = fences.DoFence("orders", first.Fence(), func() error {
		fmt.Println("unreachable: the write does not run")
		return nil
	})
	fmt.Println("late write refused:", errors.Is(err, fencelock.ErrStaleToken))
	// Output:
	// the epoch rose: true
	// late write refused: true
}

// A resource keyed to one group refuses another group's fences, whatever
// their tokens, until the operator re-keys it: here the group was
// bootstrapped again from empty Dirs, so its tokens restart low.
func ExampleFencer_Rekey() {
	fences := fencelock.NewFencer()
	old := fencelock.Fence{Group: 0xfeed, Token: 1 << 40} // lock.Fence() of the old group's holder
	fmt.Println(fences.DoFence("orders", old, func() error { return nil }))

	reborn := fencelock.Fence{Group: 0xbeef, Token: 65536} // the new group's first holder
	err := fences.DoFence("orders", reborn, func() error { return nil })
	fmt.Println(errors.Is(err, fencelock.ErrOtherGroup), errors.Is(err, fencelock.ErrStaleToken))

	// Every holder of the old group has stopped: the operator re-keys.
	if err := fences.Rekey("orders", reborn.Group); err != nil {
		log.Fatal(err)
	}
	fmt.Println(fences.DoFence("orders", reborn, func() error { return nil }))
	err = fences.DoFence("orders", old, func() error { return nil })
	fmt.Println(errors.Is(err, fencelock.ErrOtherGroup))
	// Output:
	// <nil>
	// true false
	// <nil>
	// true
}
