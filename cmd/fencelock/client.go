package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	apiclient "github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/httpapi"
)

// clientFlags are the flags every client command has.
type clientFlags struct {
	url, tokenFile, ca, cert, key string
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("FENCELOCK_HTTP")
	if def == "" {
		def = "http://127.0.0.1:7080"
	}
	fs.StringVar(&f.url, "http", def, "the replicas' API base URLs, comma-separated: calls fail over to the next when one does not answer (env FENCELOCK_HTTP)")
	fs.StringVar(&f.tokenFile, "token-file", os.Getenv("FENCELOCK_TOKEN_FILE"), "file whose first line is the bearer token (env FENCELOCK_TOKEN_FILE)")
	fs.StringVar(&f.ca, "cacert", "", "CA file to verify the replica's HTTPS certificate")
	fs.StringVar(&f.cert, "cert", "", "client certificate for HTTPS")
	fs.StringVar(&f.key, "key", "", "key of --cert")
}

// ErrBadURL: an --http (or FENCELOCK_HTTP) entry is not an http:// or
// https:// base URL.
var ErrBadURL = errors.New("not an http:// or https:// URL")

// parseBases splits a comma-separated list of base URLs.
func parseBases(list string) ([]string, error) {
	var bases []string
	for _, b := range strings.Split(list, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		u, err := url.Parse(b)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--http %q: %w", b, ErrBadURL)
		}
		bases = append(bases, strings.TrimRight(b, "/"))
	}
	if len(bases) == 0 {
		return nil, fmt.Errorf("--http %q: %w", list, ErrBadURL)
	}
	return bases, nil
}

// apiClient returns a client of the fencelock client package for the
// flags (--http, --token-file, --cacert, --cert, --key), once one of the
// replicas answers; it fails with ErrBadURL for a bad --http, and with the
// client's error (wrapping fencelock.ErrUnavailable) when no replica
// answered before ctx ended.
func (f *clientFlags) apiClient(ctx context.Context) (*apiclient.Client, error) {
	return f.apiClientWithin(ctx, 0)
}

// read runs fn with a client of the replicas (apiClient) under a read's
// bound (callCtx), and closes the client after. When no client can be made
// (a bad --http, an unreadable --token-file, no replica answering) fn does
// not run and that is the error.
func (f *clientFlags) read(fn func(context.Context, *apiclient.Client) error) error {
	return withClient(callCtx, f.apiClient, fn)
}

// change is read for a change of the group table or the membership: under
// changeCtx's bound, through changeClient.
func (f *clientFlags) change(fn func(context.Context, *apiclient.Client) error) error {
	return withClient(changeCtx, f.changeClient, fn)
}

func withClient(bound func() (context.Context, context.CancelFunc), connect func(context.Context) (*apiclient.Client, error), fn func(context.Context, *apiclient.Client) error) error {
	ctx, cancel := bound()
	defer cancel()
	c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// changeClient is apiClient for a change of the group table or the
// membership, which a replica may take up to httpapi.GroupChangeTimeout
// to answer: each try is bounded by that and an even share of the time
// ctx leaves (the client's failover), not by the 5s a read gets.
func (f *clientFlags) changeClient(ctx context.Context) (*apiclient.Client, error) {
	return f.apiClientWithin(ctx, httpapi.GroupChangeTimeout)
}

// apiClientWithin is apiClient with attempt bounding each try while other
// replicas remain to be asked (0: the client's default).
func (f *clientFlags) apiClientWithin(ctx context.Context, attempt time.Duration) (*apiclient.Client, error) {
	bases, err := parseBases(f.url)
	if err != nil {
		return nil, err
	}
	token, tc, err := f.credentials()
	if err != nil {
		return nil, err
	}
	return apiclient.New(ctx, apiclient.Config{Endpoints: bases, Token: token, TLS: tc, AttemptTimeout: attempt})
}

// credentials reads the bearer token (the first line of --token-file, ""
// without one) and the TLS configuration (nil without --cacert or --cert).
func (f *clientFlags) credentials() (string, *tls.Config, error) {
	var token string
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	if f.ca == "" && f.cert == "" {
		return token, nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return "", nil, fmt.Errorf("--cacert: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("--cacert %s holds no PEM certificate", f.ca)
		}
	}
	if f.cert != "" {
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return "", nil, fmt.Errorf("--cert: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return token, tc, nil
}
