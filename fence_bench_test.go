package fencelock

import (
	"fmt"
	"testing"
)

// Fencer.Do is on the protected resource's write path. Run with
//
//	go test -run '^$' -bench Fencer -benchmem .
func BenchmarkFencerDo(b *testing.B) {
	write := func() error { return nil }
	b.Run("one-resource", func(b *testing.B) {
		f := NewFencer()
		b.ReportAllocs()
		tok := uint64(0)
		for b.Loop() {
			tok++
			if err := f.Do("bench/res", tok, write); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stale", func(b *testing.B) {
		f := NewFencer()
		f.Raise("bench/res", 1<<40)
		b.ReportAllocs()
		for b.Loop() {
			if err := f.Do("bench/res", 1, write); err == nil {
				b.Fatal("a stale token was admitted")
			}
		}
	})
	b.Run("1000-resources-parallel", func(b *testing.B) {
		f := NewFencer()
		names := make([]string, 1000)
		for i := range names {
			names[i] = fmt.Sprintf("bench/res/%d", i)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i, tok := 0, uint64(0)
			for pb.Next() {
				i++
				tok++
				_ = f.Do(names[i%len(names)], tok, write)
			}
		})
	})
}
