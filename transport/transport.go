// Package transport holds the ways fencelock replicas can talk to each other.
//
// A Transport adjusts the Dragonboat NodeHost configuration of one replica
// before it starts. The default, used when fencelock.Config.Transport is nil,
// is TCP: fencelock's own TCP transport, listening on the replica's raft
// address (or Config.ListenAddr), with every input bounded (see frame.go).
// MutualTLS is the same transport with mutual TLS between replicas, and
// TCPConfig spells out its options (the TLS files, a DNS lookup hook).
// Peer addresses may be DNS names, resolved at every dial (see TCPConfig).
// Besides raft traffic, both TCP and Network carry calls between replicas
// (call.go: CallDialer, CallHandler), on the same port and checks.
package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/lni/dragonboat/v4/config"
)

// Transport configures how one replica sends and receives raft messages.
type Transport interface {
	// Configure sets the transport fields of the replica's NodeHost
	// configuration.
	Configure(nhc *config.NodeHostConfig) error
}

// TCP returns fencelock's TCP transport, the default: plain TCP with a CRC
// on every frame, and bounded inputs. Anyone who can reach the raft port
// can talk raft to the replica: use it on a private network only, or use
// MutualTLS.
func TCP() Transport { return TCPConfig{} }

// MutualTLS returns the TCP transport with mutual TLS (1.3) between
// replicas. Every replica presents the certificate in certFile (PEM, with
// its key in keyFile) and accepts only peers whose certificate is signed by
// the CA in caFile: a process without such a certificate cannot join the
// group, propose, vote or disturb an election, and nothing it sends is
// decoded. Each certificate must name its replica's raft host (the host
// part of its address, as a DNS name or IP SAN), and be usable for both
// server and client authentication.
//
// The files are read when the replica starts; Configure fails with a clear
// error if they are missing or do not match.
func MutualTLS(caFile, certFile, keyFile string) Transport {
	return TCPConfig{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, mutualTLS: true}
}

// TCPConfig is fencelock's TCP transport with its options spelt out; TCP
// and MutualTLS return one, and its zero value is TCP(). Set it as
// fencelock.Config.Transport.
//
// Peer addresses (Members, AddReplica's address) may be DNS names, such as
// a Kubernetes StatefulSet's "fl-0.fl.ns.svc:7001". A name is resolved each
// time a connection to the peer is opened, never cached by the transport:
// Dragonboat reopens a connection that failed, so a peer that comes back
// under the same name at another IP is reached at its new address as soon
// as the name resolves to it. Every replica must spell each address the
// same way: the handshake compares the address a peer claims with the one
// the membership gives it as strings, so a name and the IP it resolves to
// are different addresses to it. A stale answer that leads to another
// replica of the group is refused by the dialer, which resolves again at
// its next dial. With mutual TLS, a peer's certificate must carry its name
// as a DNS SAN: it is checked against the name dialled.
type TCPConfig struct {
	// CAFile, CertFile and KeyFile turn mutual TLS on, as MutualTLS does:
	// set all three, or none for plain TCP.
	CAFile, CertFile, KeyFile string

	// LookupHost resolves a host name to IP addresses, as
	// net.Resolver.LookupHost does; the addresses are tried in order. nil
	// uses the system's resolver. It is called for the host of every
	// peer address that is a name, at every dial, and for the listen
	// address (Config.ListenAddr, else Config.Addr) at start when that is
	// a name. Tests use it to map names to loopback addresses; a program
	// may use it to resolve names its own way.
	LookupHost func(ctx context.Context, host string) ([]string, error)

	mutualTLS bool // made by MutualTLS: the files are required even if empty
}

// Configure implements Transport. It fails if mutual TLS is asked for and
// its files are missing, unreadable or do not match.
func (c TCPConfig) Configure(nhc *config.NodeHostConfig) error {
	if c.mutualTLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
		f := tlsFiles{ca: c.CAFile, cert: c.CertFile, key: c.KeyFile}
		if err := f.check(); err != nil {
			return err
		}
		nhc.MutualTLS = true
		nhc.CAFile, nhc.CertFile, nhc.KeyFile = f.ca, f.cert, f.key
	}
	nhc.Expert.TransportFactory = factory{lookup: c.LookupHost}
	return nil
}

type tlsFiles struct{ ca, cert, key string }

// check loads the files once, so that a mistake is reported at start, not
// as a peer that never connects.
func (f *tlsFiles) check() error {
	if f.ca == "" || f.cert == "" || f.key == "" {
		return errors.New("mutual TLS needs a CA, a certificate and a key file")
	}
	if _, err := tls.LoadX509KeyPair(f.cert, f.key); err != nil {
		return fmt.Errorf("mutual TLS: %w", err)
	}
	pem, err := os.ReadFile(f.ca)
	if err != nil {
		return fmt.Errorf("mutual TLS: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("mutual TLS: no certificate in %s", f.ca)
	}
	return nil
}
