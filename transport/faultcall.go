package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// Calls on a Network (call.go). A call connection is an in-memory pipe
// carrying the same frames as over TCP, opened after the same checks as a
// TCP handshake (each side's Local checks the other's Hello). A link cut
// either way (a cut, an isolation, a partition) refuses new call
// connections and breaks those open on it at once, as a TCP connection
// through a dead link would end; drops and delays do not apply to calls.

// netCalls is a Network's call state.
type netCalls struct {
	mu    sync.Mutex
	hosts map[string]*faultTransport // by address, while started
	conns map[*netCall]struct{}
}

// netCall is one call connection's two ends, between from (the dialer) and
// to.
type netCall struct {
	from, to string
	a, b     net.Conn
}

func (c *netCall) close() {
	c.a.Close()
	c.b.Close()
}

func (n *Network) callState() *netCalls {
	n.callOnce.Do(func() {
		n.calls = &netCalls{hosts: make(map[string]*faultTransport), conns: make(map[*netCall]struct{})}
	})
	return n.calls
}

// startCalls makes t's replica reachable for calls.
func (n *Network) startCalls(t *faultTransport) {
	cs := n.callState()
	cs.mu.Lock()
	cs.hosts[t.self] = t
	cs.mu.Unlock()
}

// stopCalls ends every call connection of t's replica and waits for its
// handlers.
func (n *Network) stopCalls(t *faultTransport) {
	cs := n.callState()
	cs.mu.Lock()
	if cs.hosts[t.self] == t {
		delete(cs.hosts, t.self)
	}
	var broken []*netCall
	for c := range cs.conns {
		if c.from == t.self || c.to == t.self {
			broken = append(broken, c)
			delete(cs.conns, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range broken {
		c.close()
	}
	t.calls.Wait()
}

// breakCalls ends the call connections on links cut now.
func (n *Network) breakCalls() {
	cs := n.callState()
	cs.mu.Lock()
	var broken []*netCall
	for c := range cs.conns {
		if n.cut(c.from, c.to) || n.cut(c.to, c.from) {
			broken = append(broken, c)
			delete(cs.conns, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range broken {
		c.close()
	}
}

// DialCall implements CallDialer for a Network.
func (f *faultFactory) DialCall(ctx context.Context, target string) (CallConn, error) {
	self := f.self.Load()
	if self == nil {
		return nil, errNotStarted
	}
	n := f.n
	if n.cut(*self, target) || n.cut(target, *self) {
		return nil, fmt.Errorf("fault network: %s cannot reach %s: %w", *self, target, errLinkDown)
	}
	cs := n.callState()
	cs.mu.Lock()
	peer := cs.hosts[target]
	cs.mu.Unlock()
	if peer == nil {
		return nil, fmt.Errorf("fault network: no replica runs at %s", target)
	}
	if f.local == nil || peer.local == nil {
		return nil, fmt.Errorf("%w: a transport without a handshake carries no calls", ErrNoCalls)
	}
	mine, theirs := f.local.Hello(), peer.local.Hello()
	if err := peer.local.Check(mine); err != nil {
		return nil, fmt.Errorf("%w: the replica at %s refused this one: %v", errRefused, target, err)
	}
	if err := f.local.Check(theirs); err != nil {
		return nil, fmt.Errorf("%w: refused the replica at %s: %v", errRefused, target, err)
	}
	if theirs.Addr != target {
		return nil, fmt.Errorf("%w: the replica at %s is replica %d at %s", errRefused, target, theirs.Replica, theirs.Addr)
	}
	peer.local.Contact(mine.Replica)
	f.local.Contact(theirs.Replica)
	h, ok := peer.local.(CallHandler)
	if !ok {
		return nil, fmt.Errorf("%w: the replica at %s", ErrNoCalls, target)
	}
	a, b := net.Pipe()
	c := &netCall{from: *self, to: target, a: a, b: b}
	cs.mu.Lock()
	if cs.hosts[target] != peer {
		cs.mu.Unlock()
		c.close()
		return nil, fmt.Errorf("fault network: the replica at %s stopped", target)
	}
	cs.conns[c] = struct{}{}
	peer.calls.Add(1)
	cs.mu.Unlock()
	go func() {
		defer peer.calls.Done()
		defer c.close()
		h.ServeCall(mine, newFrameCall(b, frameReader{conn: b}))
	}()
	return newFrameCall(a, frameReader{conn: a}), nil
}
