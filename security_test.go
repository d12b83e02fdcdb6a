package fencelock

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"hash/crc32"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/transport"
)

// impostorConfig starts replica id on addr with its own dir and a short
// election timeout, so that it campaigns often.
func impostorConfig(t testing.TB, id uint64, addr string, members map[uint64]string, tr transport.Transport) Config {
	return Config{ReplicaID: id, Members: members, Addr: addr, Dir: t.TempDir(), Transport: tr,
		Logger: quietLogger, ElectionTicks: 5, HeartbeatTicks: 1}
}

func startImpostor(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// A group with mutual TLS refuses every process without a certificate from
// its CA: one with another CA's certificate that takes a member's address
// and ID, one without TLS that campaigns, one added by an operator but
// started with the wrong certificate, and raw connections. None can join,
// propose, vote or disturb an election, while the group keeps granting.
func TestMutualTLSRefusesImpostors(t *testing.T) {
	ca, other := newTestCA(t, "group"), newTestCA(t, "impostor")
	trs := map[uint64]transport.Transport{}
	for id := uint64(1); id <= 3; id++ {
		cert, key := ca.issue("replica" + string(rune('0'+id)))
		trs[id] = transport.MutualTLS(ca.file, cert, key)
	}
	c := newTCPCluster(t, 3, func(cfg *Config) { cfg.Transport = trs[cfg.ReplicaID] })
	ctx := testCtx(t)
	leader := c.leader(ctx)
	victim := leader%3 + 1
	survivor := victim%3 + 1
	g := startGranter(t, ctx, newSession(t, ctx, c.node(survivor)), "k")
	defer g.finish()
	g.waitMore(ctx, 3)
	term := c.node(leader).Status().Term

	// 1. A process with another CA's certificate takes the victim's place:
	// same ID, same address, same member list, an empty log.
	c.crash(victim)
	badCert, badKey := other.issue("impostor")
	wrongCA := startImpostor(t, impostorConfig(t, victim, c.members[victim], c.members,
		transport.MutualTLS(other.file, badCert, badKey)))
	// 2. A process without TLS campaigns as a new replica 9.
	addr9 := freeAddr(t)
	plain := startImpostor(t, impostorConfig(t, 9, addr9,
		map[uint64]string{9: addr9, 1: c.members[1], 2: c.members[2], 3: c.members[3]}, transport.TCP()))
	// 3. An operator adds replica 4, but the process started there has the
	// wrong CA.
	addr4 := freeAddr(t)
	require.NoError(t, c.node(leader).AddNonVoting(ctx, 4, addr4))
	cfg4 := impostorConfig(t, 4, addr4, nil, transport.MutualTLS(other.file, badCert, badKey))
	cfg4.Members, cfg4.Join = nil, true
	joiner := startImpostor(t, cfg4)
	// 4. Raw traffic: Dragonboat's frame that crashes its own TCP transport,
	// and a TLS client with a certificate from the wrong CA.
	rawEvilFrame(t, c.members[leader])
	badPair, err := tls.LoadX509KeyPair(badCert, badKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca.file)
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(pem))
	conn, err := tls.Dial("tcp", c.members[leader], &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{badPair}})
	if err == nil {
		// TLS 1.3 reports a refused client certificate on the first read.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	require.Error(t, err, "the server refuses a client certificate from another CA")

	// The impostors campaign every 50-100ms: give them many tries, each
	// refused, while the group keeps granting and must not move. A refusal
	// is a connection that fails: the impostors' own to the group, and the
	// group's to the mis-certified joiner (which dials nobody) and to the
	// victim's address.
	failures := func() []uint64 {
		return []uint64{wrongCA.Stats().ConnectionFailures, plain.Stats().ConnectionFailures,
			c.node(leader).Stats().ConnectionFailures + c.node(survivor).Stats().ConnectionFailures}
	}
	g.waitMore(ctx, 30)
	before := failures()
	waitUntil(t, ctx, "the impostors were refused 10 more times each", func() bool {
		now := failures()
		for i := range now {
			if now[i] < before[i]+10 {
				return false
			}
		}
		return true
	})
	t.Logf("connection failures (impostor with another CA, impostor without TLS, the group): %v, then %v", before, failures())
	g.waitMore(ctx, 5)
	// Impostors that got through would bump the term at every campaign (or
	// crash the group, as a control run with a shared CA shows); a loaded
	// machine may cause one genuine election.
	st := c.node(survivor).Status()
	require.LessOrEqual(t, st.Term, term+1, "no impostor forced elections")
	require.Contains(t, []uint64{leader, survivor}, st.LeaderID, "the group is led by one of its own")
	for _, imp := range []*Node{wrongCA, plain, joiner} {
		ist := imp.Status()
		require.Zero(t, ist.LeaderID, "replica %d never heard from the group", ist.ReplicaID)
		require.Less(t, ist.AppliedIndex, uint64(10), "replica %d received none of the group's log", ist.ReplicaID)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = wrongCA.NewSession(short)
	require.ErrorIs(t, err, ErrUnavailable, "an impostor cannot propose")
	short2, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	_, err = joiner.Members(short2)
	require.ErrorIs(t, err, ErrUnavailable, "the mis-certified joiner never caught up")
	require.NoError(t, c.node(survivor).RemoveReplica(ctx, 4))

	// The real replica comes back with its certificate and catches up.
	wrongCA.Close()
	n := c.start(victim)
	_, err = n.Members(ctx)
	require.NoError(t, err)
	g.waitMore(ctx, 3)
}

// rawEvilFrame sends the 20 bytes that make Dragonboat's built-in TCP
// transport allocate 2^62 bytes (and crash) to addr: a magic number and a
// header whose checksum is right and whose length is absurd.
func rawEvilFrame(t testing.TB, addr string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	h := make([]byte, 18)
	binary.BigEndian.PutUint16(h, 100)
	binary.BigEndian.PutUint64(h[2:], 1<<62)
	binary.BigEndian.PutUint32(h[10:], crc32.ChecksumIEEE(h))
	_, _ = conn.Write(append([]byte{0xAE, 0x7D}, h...))
	// The replica closes the connection rather than read on.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err)
}

// The default transport survives the frame that crashes Dragonboat's own,
// and a frame that claims a huge length and then trickles: the replica
// allocates only what arrives and keeps working.
func TestTransportSurvivesForgedFrames(t *testing.T) {
	c := newTCPCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader(ctx)
	s := newSession(t, ctx, c.node(leader))
	rawEvilFrame(t, c.members[leader])

	conn, err := net.Dial("tcp", c.members[leader])
	require.NoError(t, err)
	defer conn.Close()
	// fencelock's own header, claiming the largest batch allowed, then 1 MiB.
	h := []byte{0xF1, 0x0C, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[4:], transport.MaxBatchFrame)
	_, err = conn.Write(h)
	require.NoError(t, err)
	_, err = conn.Write(make([]byte, 1<<20))
	require.NoError(t, err)

	l, err := s.Acquire(ctx, "still-working")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

func TestMutualTLSConfigErrors(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	cert, key := ca.issue("replica")
	other, otherKey := newTestCA(t, "other").issue("other")
	for _, tr := range []transport.Transport{
		transport.MutualTLS("", cert, key),
		transport.MutualTLS(filepath.Join(dir, "missing.pem"), cert, key),
		transport.MutualTLS(ca.file, cert, otherKey), // key does not match
		transport.MutualTLS(key, cert, key),          // not a CA certificate
		transport.MutualTLS(ca.file, other, filepath.Join(dir, "nokey")),
	} {
		_, err := Start(ctx, Config{ReplicaID: 1, Members: map[uint64]string{1: freeAddr(t)}, Dir: dir,
			Transport: tr, Logger: quietLogger})
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
}

// Two groups on one network with different deployment IDs ignore each
// other, even when one reuses an address and a replica ID of the other: the
// other group's leader keeps sending to that address, and its messages are
// dropped.
func TestDeploymentIDKeepsGroupsApart(t *testing.T) {
	c := newTCPCluster(t, 3, func(cfg *Config) { cfg.DeploymentID = 1 })
	ctx := testCtx(t)
	first := c.leader(ctx)
	c.stop(first) // one election more, so that group A's term exceeds group B's
	c.start(first)
	leader := c.leader(ctx)
	reused := leader%3 + 1
	sa := newSession(t, ctx, c.node(leader))
	la, err := sa.Acquire(ctx, "shared-name")
	require.NoError(t, err)

	// Host "reused" is repurposed for group B, with the same replica ID.
	c.stop(reused)
	b, err := Start(ctx, Config{ReplicaID: reused, Members: map[uint64]string{reused: c.members[reused]},
		Dir: t.TempDir(), DeploymentID: 2, Logger: quietLogger})
	require.NoError(t, err)
	defer b.Close()
	sb := newSession(t, ctx, b)
	lb, err := sb.Acquire(ctx, "shared-name")
	require.NoError(t, err, "group B has its own lock table")
	require.Equal(t, sb.ID(), inspect(t, ctx, b, "shared-name").SessionID)
	require.Equal(t, sa.ID(), inspect(t, ctx, c.node(leader), "shared-name").SessionID)
	termA, termB := c.node(leader).Status().Term, b.Status().Term
	require.Greater(t, termA, termB)

	// Group A's leader heartbeats replica "reused" at its address every
	// 20ms; with a shared deployment ID, B would follow A's higher term.
	time.Sleep(time.Second)
	st := b.Status()
	require.Equal(t, reused, st.LeaderID, "group B still leads itself")
	require.Equal(t, termB, st.Term)
	require.NoError(t, lb.Release(ctx))
	require.True(t, inspect(t, ctx, c.node(leader), "shared-name").Held, "B's release did not touch A")
	require.NoError(t, la.Release(ctx))
}

// testCA is a certificate authority made at run time: no key is committed.
type testCA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := &testCA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.file = ca.write(name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(name, typ string, der []byte) string {
	path := filepath.Join(ca.dir, name)
	require.NoError(ca.t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}

// issue makes a certificate for a replica on 127.0.0.1, good for both ends
// of a connection, and returns its certificate and key files.
func (ca *testCA) issue(name string) (certFile, keyFile string) {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(ca.t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(ca.t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(ca.t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(ca.t, err)
	return ca.write(name+".pem", "CERTIFICATE", der), ca.write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
}
