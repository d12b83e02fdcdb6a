package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// The hot paths that need no cluster: applying each command kind, the entry
// codec, the Dragonboat adapter's Update, and snapshots. Run with
//
//	go test -run '^$' -bench . -benchmem ./fsm

// benchState returns a state with n sessions; it applies entries from index 1.
type benchState struct {
	st  *State
	idx uint64
	ids []uint64
}

func newBenchState(b *testing.B, sessions int) *benchState {
	bs := &benchState{st: New()}
	for i := range sessions {
		rs := bs.apply(openCmd(uint64(i + 1)))
		if rs[0].Status != OK {
			b.Fatalf("open: %v", rs[0].Status)
		}
		bs.ids = append(bs.ids, rs[0].Value)
	}
	return bs
}

func (bs *benchState) apply(cmds ...Command) []Result {
	bs.idx++
	rs, _ := bs.st.Apply(bs.idx, cmds)
	return rs
}

// One command per entry, as an idle group applies them.
func BenchmarkApply(b *testing.B) {
	b.Run("acquire+release", func(b *testing.B) {
		bs := newBenchState(b, 1)
		s := bs.ids[0]
		b.ReportAllocs()
		seq := uint64(0)
		for b.Loop() {
			seq++
			r := bs.apply(Command{Kind: KindAcquire, Session: s, Seq: seq, Floor: seq, Name: "bench/a"})
			seq++
			bs.apply(Command{Kind: KindRelease, Session: s, Seq: seq, Floor: seq, Name: "bench/a", Token: r[0].Value})
		}
	})
	b.Run("keep-alive", func(b *testing.B) {
		bs := newBenchState(b, 1)
		b.ReportAllocs()
		for b.Loop() {
			bs.apply(keepAliveCmd(bs.ids[0], 1))
		}
	})
	b.Run("handoff", func(b *testing.B) {
		// Two sessions pass one lock back and forth: each release grants
		// the queued acquire of the other, in the same entry.
		bs := newBenchState(b, 2)
		a, c := bs.ids[0], bs.ids[1]
		seqs := map[uint64]uint64{a: 1, c: 1}
		tok := bs.apply(Command{Kind: KindAcquire, Session: a, Seq: 1, Floor: 1, Name: "hot"})[0].Value
		holder, other := a, c
		b.ReportAllocs()
		for b.Loop() {
			seqs[other]++
			bs.apply(Command{Kind: KindAcquire, Session: other, Seq: seqs[other], Floor: seqs[other], Name: "hot", Wait: true})
			seqs[holder]++
			bs.apply(Command{Kind: KindRelease, Session: holder, Seq: seqs[holder], Floor: seqs[holder], Name: "hot", Token: tok})
			tok = bs.st.Lock("hot").Token
			holder, other = other, holder
		}
	})
	b.Run("open+close", func(b *testing.B) {
		bs := newBenchState(b, 0)
		b.ReportAllocs()
		nonce := uint64(0)
		for b.Loop() {
			nonce++
			id := bs.apply(openCmd(nonce))[0].Value
			bs.apply(closeCmd(id))
		}
	})
	b.Run("acquire+cancel", func(b *testing.B) {
		bs := newBenchState(b, 2)
		a, c := bs.ids[0], bs.ids[1]
		bs.apply(Command{Kind: KindAcquire, Session: a, Seq: 1, Floor: 1, Name: "held"})
		b.ReportAllocs()
		seq := uint64(0)
		for b.Loop() {
			seq++
			bs.apply(Command{Kind: KindAcquire, Session: c, Seq: seq, Floor: seq, Name: "held", Wait: true})
			bs.apply(Command{Kind: KindCancel, Session: c, Target: seq, Floor: seq})
		}
	})
	b.Run("expire-not-applied", func(b *testing.B) {
		bs := newBenchState(b, 1)
		bs.apply(keepAliveCmd(bs.ids[0], 1))
		b.ReportAllocs()
		for b.Loop() {
			bs.apply(expireCmd(bs.ids[0], 1)) // a newer keep-alive exists
		}
	})
}

// A full entry of 64 acquires by 64 sessions, then one of their releases.
func BenchmarkApplyBatch64(b *testing.B) {
	bs := newBenchState(b, 64)
	acq, rel := make([]Command, 64), make([]Command, 64)
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("bench/W2/%d", i)
	}
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		for i, s := range bs.ids {
			acq[i] = Command{Kind: KindAcquire, Session: s, Seq: seq, Floor: seq, Name: names[i]}
		}
		rs := bs.apply(acq...)
		seq++
		for i, s := range bs.ids {
			rel[i] = Command{Kind: KindRelease, Session: s, Seq: seq, Floor: seq, Name: names[i], Token: rs[i].Value}
		}
		bs.apply(rel...)
	}
	b.ReportMetric(float64(b.N*128)/b.Elapsed().Seconds(), "cmds/s")
}

func sampleBatch(n int) []Command {
	cmds := make([]Command, n)
	for i := range cmds {
		switch i % 4 {
		case 0:
			cmds[i] = Command{Kind: KindAcquire, Session: 1<<32 + uint64(i), Seq: 1000 + uint64(i), Floor: 1000, Name: "bench/W2/12", Wait: true}
		case 1:
			cmds[i] = Command{Kind: KindRelease, Session: 1<<32 + uint64(i), Seq: 1000 + uint64(i), Floor: 1000, Name: "bench/W2/12", Token: 1 << 40}
		case 2:
			cmds[i] = Command{Kind: KindKeepAlive, Session: 1<<32 + uint64(i), Floor: 1000}
		case 3:
			cmds[i] = Command{Kind: KindCancel, Session: 1<<32 + uint64(i), Target: 1001, Floor: 1000}
		}
	}
	return cmds
}

func BenchmarkCodec(b *testing.B) {
	for _, n := range []int{1, 64} {
		cmds := sampleBatch(n)
		enc := AppendBatch(nil, cmds)
		b.Run(fmt.Sprintf("encode/%d", n), func(b *testing.B) {
			buf := make([]byte, 0, len(enc))
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				buf = AppendBatch(buf[:0], cmds)
			}
		})
		b.Run(fmt.Sprintf("decode/%d", n), func(b *testing.B) {
			dst := make([]Command, 0, n)
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				var err error
				if dst, err = DecodeBatch(enc, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
		rs := make([]Result, n)
		for i := range rs {
			rs[i] = Result{Status: Granted, Value: 1<<40 + uint64(i)}
		}
		renc := AppendResults(nil, rs)
		b.Run(fmt.Sprintf("results-encode/%d", n), func(b *testing.B) {
			buf := make([]byte, 0, len(renc))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendResults(buf[:0], rs)
			}
		})
		b.Run(fmt.Sprintf("results-decode/%d", n), func(b *testing.B) {
			dst := make([]Result, 0, n)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = DecodeResults(renc, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The adapter's Update: decode, apply, encode the replies.
func BenchmarkMachineUpdate(b *testing.B) {
	m := NewStateMachine(nil)(1, 1)
	idx := uint64(0)
	update := func(cmds ...Command) sm.Result {
		idx++
		r, err := m.Update(sm.Entry{Index: idx, Cmd: AppendBatch(nil, cmds)})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	r := update(openCmd(1))
	res, _ := DecodeResults(r.Data, nil)
	s := res[0].Value
	acq := AppendBatch(nil, []Command{{Kind: KindAcquire, Session: s, Seq: 2, Floor: 2, Name: "bench/a"}})
	b.ReportAllocs()
	seq := uint64(1)
	for b.Loop() {
		seq += 2
		idx++
		acq = AppendBatch(acq[:0], []Command{{Kind: KindAcquire, Session: s, Seq: seq, Floor: seq, Name: "bench/a"}})
		r, _ := m.Update(sm.Entry{Index: idx, Cmd: acq})
		res, _ = DecodeResults(r.Data, res[:0])
		idx++
		rel := AppendBatch(acq[:0], []Command{{Kind: KindRelease, Session: s, Seq: seq + 1, Floor: seq + 1, Name: "bench/a", Token: res[0].Value}})
		_, _ = m.Update(sm.Entry{Index: idx, Cmd: rel})
	}
}

// Snapshots of a state holding many locks (W6 holds 1,000,000). Its
// sessions keep the reply of every request (floor 1); the "-floor" case's
// clients raised their floors as they went, as W6's do, so that the
// restored state is the locks alone.
func BenchmarkSnapshot(b *testing.B) {
	type size struct {
		locks int
		floor bool
	}
	for _, sz := range []size{{100_000, false}, {1_000_000, false}, {1_000_000, true}} {
		locks, suffix := sz.locks, ""
		if sz.floor {
			suffix = "-floor"
		}
		bs := newBenchState(b, locks/100)
		cmds := make([]Command, 0, 1000)
		for i := 0; i < locks; i += len(cmds) {
			cmds = cmds[:0]
			for j := 0; j < 1000 && i+j < locks; j++ {
				n := i + j
				s := bs.ids[n%len(bs.ids)]
				seq := uint64(n/len(bs.ids) + 1)
				floor := uint64(1)
				if sz.floor {
					floor = seq
				}
				cmds = append(cmds, Command{Kind: KindAcquire, Session: s, Seq: seq, Floor: floor, Name: fmt.Sprintf("bench/W6/%d", n)})
			}
			bs.apply(cmds...)
		}
		var buf bytes.Buffer
		if err := bs.st.Save(&buf); err != nil {
			b.Fatal(err)
		}
		snap := buf.Bytes()
		b.Run(fmt.Sprintf("save/%d-locks%s", locks, suffix), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(snap)))
			for b.Loop() {
				if err := bs.st.Save(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("restore/%d-locks%s", locks, suffix), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(snap)))
			var st *State
			for b.Loop() {
				st = nil // the previous one is garbage while the next is read, as in RecoverFromSnapshot
				var err error
				if st, err = Restore(bytes.NewReader(snap)); err != nil {
					b.Fatal(err)
				}
			}
			// What the restored state takes once built: a replica's
			// memory, where allocs/op is its garbage collector's work.
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(st)
			st = nil
			runtime.GC()
			runtime.ReadMemStats(&before)
			live := float64(after.HeapAlloc - before.HeapAlloc)
			b.ReportMetric(live/(1<<20), "live-MiB")
			b.ReportMetric(live/float64(locks), "live-B/lock")
		})
	}
}
