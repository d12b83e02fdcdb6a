package transport_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/transport"
)

// resolver maps test names to loopback addresses and records, per replica,
// what each name resolved to.
type resolver struct {
	mu      sync.Mutex
	m       map[string]string
	answers map[uint64]map[string][]string // replica -> host -> answers, in order
	changed chan struct{}                  // closed and replaced at each answer
}

func (r *resolver) set(host, ip string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[host] = ip
}

// hook is replica id's LookupHost.
func (r *resolver) hook(id uint64) func(context.Context, string) ([]string, error) {
	return func(_ context.Context, host string) ([]string, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		ip, ok := r.m[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		if r.answers[id] == nil {
			r.answers[id] = map[string][]string{}
		}
		r.answers[id][host] = append(r.answers[id][host], ip)
		close(r.changed)
		r.changed = make(chan struct{})
		return []string{ip}, nil
	}
}

// resolved reports whether replica id has resolved host to ip.
func (r *resolver) resolved(id uint64, host, ip string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.answers[id][host], ip)
}

// waitResolved waits until one of ids has resolved host to ip, and
// returns it.
func (r *resolver) waitResolved(ctx context.Context, ids []uint64, host, ip string) (uint64, error) {
	for {
		r.mu.Lock()
		for _, id := range ids {
			if slices.Contains(r.answers[id][host], ip) {
				r.mu.Unlock()
				return id, nil
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-changed:
		}
	}
}

// freePortOn returns a port free on every one of ips at once.
func freePortOn(t *testing.T, ips ...string) int {
	t.Helper()
	for range 20 {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		require.NoError(t, err)
		port := first.Addr().(*net.TCPAddr).Port
		free := true
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		first.Close()
		if free {
			return port
		}
	}
	t.Fatalf("no port free on all of %v", ips)
	return 0
}

// Members given as DNS names, as a Kubernetes StatefulSet's pods have them:
// replica 3 stops, comes back on its Dir under the same name at another IP
// (127.0.0.2 instead of 127.0.0.1), and a peer that had talked to it at the
// old address reaches it at the new one: with the third replica stopped,
// a write commits only with replica 3 in the quorum. Real TCP, the names
// mapped to loopback addresses by the transport's lookup hook.
func TestMembersByNameFollowAReplicaToItsNewAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := &resolver{m: map[string]string{}, answers: map[uint64]map[string][]string{}, changed: make(chan struct{})}
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		host := fmt.Sprintf("fl-%d.test", id)
		res.set(host, "127.0.0.1")
		port := freePortOn(t, "127.0.0.1")
		if id == 3 {
			port = freePortOn(t, "127.0.0.1", "127.0.0.2")
		}
		members[id] = net.JoinHostPort(host, strconv.Itoa(port))
	}
	dir := t.TempDir()
	nodes := map[uint64]*fencelock.Node{}
	start := func(id uint64) {
		t.Helper()
		n, err := fencelock.Start(ctx, fencelock.Config{
			ReplicaID: id, Members: members, Dir: filepath.Join(dir, fmt.Sprint(id)),
			Transport: transport.TCPConfig{LookupHost: res.hook(id)}, Logger: quiet,
		})
		require.NoError(t, err)
		nodes[id] = n
	}
	stop := func(id uint64) {
		require.NoError(t, nodes[id].Close())
		delete(nodes, id)
	}
	defer func() {
		for id := range nodes {
			stop(id)
		}
	}()
	for id := uint64(1); id <= 3; id++ {
		start(id)
	}
	// write commits a session and a lock through replica id.
	write := func(id uint64, lock string) {
		t.Helper()
		s, err := nodes[id].NewSession(ctx)
		require.NoError(t, err)
		l, err := s.TryAcquire(ctx, lock)
		require.NoError(t, err)
		require.NotZero(t, l.Token())
		require.NoError(t, s.Close(ctx))
	}
	write(1, "dns/before")

	// A write commits on a quorum with replica 3 or with a peer that
	// dialled it (its leader dials everyone; a follower dials its
	// leader): wait until a peer has reached it at the old address, and
	// keep that one.
	keep, err := res.waitResolved(ctx, []uint64{1, 2}, "fl-3.test", "127.0.0.1")
	require.NoError(t, err, "no peer dialled replica 3")
	other := 3 - keep

	stop(3)
	res.set("fl-3.test", "127.0.0.2")
	start(3)
	// Replica 3 now listens on the new address only.
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.2", portOf(t, members[3])))
	require.NoError(t, err)
	c.Close()
	_, err = net.Dial("tcp", net.JoinHostPort("127.0.0.1", portOf(t, members[3])))
	require.Error(t, err, "nothing listens at replica 3's old address")

	// Without the other peer, the group's quorum is keep and replica 3.
	stop(other)
	write(keep, "dns/after-move")
	require.True(t, res.resolved(keep, "fl-3.test", "127.0.0.2"),
		"replica %d resolved the name again after replica 3 moved", keep)

	// The other peer too, started again, reaches replica 3 at its new
	// address: with keep stopped, its writes need replica 3.
	start(other)
	stop(keep)
	write(other, "dns/other-peer")
	require.True(t, res.resolved(other, "fl-3.test", "127.0.0.2"))
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return port
}
