// Package transport holds the ways fencelock replicas can talk to each other.
//
// A Transport adjusts the Dragonboat NodeHost configuration of one replica
// before it starts. The default, used when fencelock.Config.Transport is nil,
// is TCP: fencelock's own TCP transport, listening on the replica's raft
// address (or Config.ListenAddr), with every input bounded (see frame.go).
// MutualTLS is the same transport with mutual TLS between replicas.
package transport

import (
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
func TCP() Transport { return tcp{} }

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
	return tcp{tls: &tlsFiles{ca: caFile, cert: certFile, key: keyFile}}
}

type tlsFiles struct{ ca, cert, key string }

type tcp struct{ tls *tlsFiles }

func (t tcp) Configure(nhc *config.NodeHostConfig) error {
	if t.tls != nil {
		if err := t.tls.check(); err != nil {
			return err
		}
		nhc.MutualTLS = true
		nhc.CAFile, nhc.CertFile, nhc.KeyFile = t.tls.ca, t.tls.cert, t.tls.key
	}
	nhc.Expert.TransportFactory = factory{}
	return nil
}

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
