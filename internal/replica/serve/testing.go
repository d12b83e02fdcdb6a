package serve

import (
	"bytes"
	"errors"
	"time"

	"github.com/fencelock/fencelock/internal/replica/wire"
)

// TestingStateParts makes servers send a mirror's state in parts of part
// bytes once it is larger than whole bytes, until restore is called: a test
// mirrors a state in parts without making one larger than a call message.
// Production code never calls it.
func TestingStateParts(whole, part int) (restore func()) {
	w, p := wholeState, statePart
	wholeState, statePart = whole, min(part, wire.MaxStatePart)
	return func() { wholeState, statePart = w, p }
}

// TestingStateSends sets how many states larger than one message a server
// sends to mirrors at once, until restore is called. Production code never
// calls it.
func TestingStateSends(most int32) (restore func()) {
	old := stateSendsMost.Swap(most)
	return func() { stateSendsMost.Store(old) }
}

// TestingCall is one end of an in-memory call connection (a
// transport.CallConn), for the tests of this package and of package replica
// that run a call's two sides without a transport. Production code never
// uses it.
type TestingCall struct {
	in, out chan []byte
	done    chan struct{}
}

// TestingCalls returns the two ends of an in-memory call connection: what
// one end sends, the other receives, in order.
func TestingCalls() (*TestingCall, *TestingCall) {
	a, b := make(chan []byte, 4), make(chan []byte, 4)
	done := make(chan struct{})
	return &TestingCall{in: a, out: b, done: done}, &TestingCall{in: b, out: a, done: done}
}

func (p *TestingCall) Send(msg []byte) error {
	select {
	case p.out <- bytes.Clone(msg):
		return nil
	case <-p.done:
		return errors.New("closed")
	}
}

func (p *TestingCall) Recv() ([]byte, error) {
	select {
	case b := <-p.in:
		return b, nil
	case <-p.done:
		return nil, errors.New("closed")
	}
}

func (p *TestingCall) SetIdle(time.Duration) {}

// Close does nothing: a test hangs up with HangUp, when it chooses, so that
// the side under test closing its end does not end the other side's calls.
func (p *TestingCall) Close() error { return nil }

// HangUp ends the connection for both ends: every Send and Recv on either
// fails from then on. Call it once.
func (p *TestingCall) HangUp() { close(p.done) }
