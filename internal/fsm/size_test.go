package fsm

import (
	"bytes"
	"testing"
	"unsafe"
)

// A restored state holds one lock per name, so its size is most of a
// replica's memory: a plain exclusive lock must fit the 128-byte size
// class with its first grant inside it, and allocate no lockMore.
func TestLockSize(t *testing.T) {
	if n := unsafe.Sizeof(lock{}); n > 128 {
		t.Errorf("lock is %d bytes, want at most 128", n)
	}
	st := New()
	rs, _ := st.Apply(1, []Command{openCmd(1)})
	s := rs[0].Value
	rs, _ = st.Apply(2, []Command{{Kind: KindAcquire, Session: s, Seq: 1, Floor: 1, Name: "a"}})
	if rs[0].Status != Granted {
		t.Fatalf("acquire: %v", rs[0].Status)
	}
	if l := st.locks.get("a"); l == nil || l.more != nil {
		t.Errorf("a plain held lock has a lockMore: %+v", l)
	}
	var buf bytes.Buffer
	if err := st.Save(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if l := got.locks.get("a"); l == nil || l.more != nil {
		t.Errorf("a restored plain lock has a lockMore: %+v", l)
	}
}
