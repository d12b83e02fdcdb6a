package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/stretchr/testify/require"
)

// writeCert makes a key and a certificate signed by parent (self-signed if
// nil) and writes them as PEM files under dir.
func writeCert(t *testing.T, dir, name string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		IsCA:        isCA, BasicConstraintsValid: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return cert, key
}

// serve over HTTPS with client certificates and bearer tokens: each layer
// refuses what it should, and the client commands get through with both.
func TestServeTLSAndTokens(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	ca, caKey := writeCert(t, dir, "ca", true, nil, nil)
	writeCert(t, dir, "server", false, ca, caKey)
	writeCert(t, dir, "client", false, ca, caKey)
	f := func(n string) string { return filepath.Join(dir, n) }
	require.NoError(t, os.WriteFile(f("tokens"), []byte("# tokens\nsekret\n"), 0o600))

	addr := fencelocktest.FreePort(t)
	cmd := exec.Command(bin, "serve", "--id", "1", "--peers", "1="+fencelocktest.FreePort(t), "--dir", f("data"), "--http", addr,
		"--http-cert", f("server.crt"), "--http-key", f("server.key"), "--http-client-ca", f("ca.crt"),
		"--tokens-file", f("tokens"), "--log-level", "error")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cc, err := tls.LoadX509KeyPair(f("client.crt"), f("client.key"))
	require.NoError(t, err)
	withCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cc}}}}
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + addr
	fencelocktest.WaitFor(t, "the replica to be ready", func() bool {
		ok, _ := isReady(withCert, base)
		return ok
	})

	_, err = noCert.Get(base + "/healthz")
	require.Error(t, err, "a client without a certificate got through")
	resp, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
		require.NotEqual(t, 200, resp.StatusCode, "plain HTTP served")
	}
	resp, err = withCert.Post(base+"/v1/sessions", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
	req, _ := http.NewRequest("POST", base+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer sekret")
	resp, err = withCert.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)

	out, err := exec.Command(bin, "sessions", "--http", base, "--cacert", f("ca.crt"), "--cert", f("client.crt"),
		"--key", f("client.key"), "--token-file", f("tokens")).CombinedOutput()
	require.Error(t, err, "the tokens file's first line is a comment, so no valid token is sent: %s", out)
	require.NoError(t, os.WriteFile(f("token"), []byte("sekret\n"), 0o600))
	out, err = exec.Command(bin, "sessions", "--http", base, "--cacert", f("ca.crt"), "--cert", f("client.crt"),
		"--key", f("client.key"), "--token-file", f("token")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.HasPrefix(string(out), "SESSION"), "%s", out)
	require.Equal(t, 2, strings.Count(string(out), "\n"), "one session listed: %s", out)
}
