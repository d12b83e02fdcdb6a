package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
	"github.com/fencelock/fencelock/transport"
)

// parseIDMap parses "1=a,2=b" into a map.
func parseIDMap(flagName, s string) (map[uint64]string, error) {
	m := map[uint64]string{}
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		id, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || id == 0 || v == "" {
			return nil, fmt.Errorf("--%s: %q is not ID=ADDRESS with ID a positive integer", flagName, kv)
		}
		if _, dup := m[id]; dup {
			return nil, fmt.Errorf("--%s: replica %d given twice", flagName, id)
		}
		if err := checkAddress(flagName, v); err != nil {
			return nil, fmt.Errorf("--%s %d=%s: %w", flagName, id, v, err)
		}
		m[id] = v
	}
	return m, nil
}

// checkAddress checks one address of --peers (HOST:PORT) or --http-peers
// (a URL), so that a mistake is reported in the flag's words before the
// library reports it in Config's.
func checkAddress(flagName, v string) error {
	if flagName == "http-peers" {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("want a URL such as http://10.0.0.1:7080")
		}
		return nil
	}
	return checkHostPort(v, "10.0.0.1:7001")
}

// checkHostPort checks a HOST:PORT flag value (HOST may be empty, for every
// interface); example is an address to show in the error.
func checkHostPort(v, example string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("want HOST:PORT, such as %s (no port in %q)", example, v)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("want HOST:PORT with a port from 1 to 65535, such as %s", example)
	}
	return nil
}

// checkDev checks that --dev is given where it is safe: a loopback --http
// (only this machine's processes reach it) and no tokens file (with tokens,
// an admin token is the way).
func checkDev(httpAddr, tokensFile string) error {
	if tokensFile != "" {
		return errors.New("serve: --dev and --tokens-file do not go together: with tokens, give the admin commands a token with the admin right (--token-file) instead")
	}
	host, _, err := net.SplitHostPort(httpAddr)
	if err == nil && host == "localhost" {
		return nil
	}
	if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		return fmt.Errorf("serve: --dev lets this machine run admin calls without a token, so --http must be a loopback address such as 127.0.0.1:7080, not %q", httpAddr)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	if err != nil {
		return l, fmt.Errorf("--log-level: %q is not debug, info, warn or error", s)
	}
	return l, nil
}

// parsePlacement reads --placement.
func parsePlacement(s string) (fencelock.Placement, error) {
	switch s {
	case "every":
		return fencelock.PlaceEveryGroup, nil
	case "own":
		return fencelock.PlaceOwnGroups, nil
	}
	return 0, fmt.Errorf("--placement: %q is neither every nor own", s)
}

// readTokens reads the tokens file: `TOKEN [RIGHT:PREFIX ...]` lines
// (httpapi.ParseTokens); blank lines and lines starting with # are skipped.
func readTokens(path string) (*httpapi.ACL, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file: %w", err)
	}
	acl, err := httpapi.ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file %s: %w", path, err)
	}
	return acl, nil
}

// limits are the bounds that keep slow or idle clients from pinning the
// server, each a flag of serve.
type limits struct {
	idle, body, header time.Duration
	maxHeaderBytes     int
	maxStreams         int
}

func (l *limits) register(fs *flag.FlagSet) {
	fs.DurationVar(&l.idle, "idle-timeout", 60*time.Second, "close a keep-alive connection idle this long")
	fs.DurationVar(&l.body, "body-timeout", httpapi.DefaultBodyTimeout, "refuse (408) a request body not arrived this long after its headers")
	fs.DurationVar(&l.header, "header-timeout", 10*time.Second, "close a connection whose request headers take longer")
	fs.IntVar(&l.maxHeaderBytes, "max-header-bytes", 64<<10, "refuse (431) request headers larger than this")
	fs.IntVar(&l.maxStreams, "max-streams", httpapi.DefaultMaxStreams, "open watch and observe streams this replica allows; the next gets 429 too_many_streams")
}

func (l *limits) check() error {
	switch {
	case l.idle <= 0, l.body <= 0, l.header <= 0:
		return errors.New("serve: --idle-timeout, --body-timeout and --header-timeout must be positive")
	case l.maxHeaderBytes < 4<<10:
		return errors.New("serve: --max-header-bytes must be at least 4096")
	case l.maxStreams < 1:
		return errors.New("serve: --max-streams must be at least 1")
	}
	return nil
}

// server is the http.Server of h under l.
func (l *limits) server(h http.Handler, tlsCfg *tls.Config, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, TLSConfig: tlsCfg, ReadHeaderTimeout: l.header, IdleTimeout: l.idle,
		MaxHeaderBytes: l.maxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
}

// groupFlags collects the repeatable --group NAME=ID,ID,... flag.
type groupFlags []fencelock.GroupConfig

func (g *groupFlags) String() string {
	parts := make([]string, len(*g))
	for i, x := range *g {
		parts[i] = fmt.Sprintf("%s=%v", x.Name, x.Voters)
	}
	return strings.Join(parts, " ")
}

// Set parses one NAME=ID,ID,... value; the Config's validation checks the
// name and the voters.
func (g *groupFlags) Set(s string) error {
	name, ids, ok := strings.Cut(s, "=")
	if !ok || name == "" || ids == "" {
		return fmt.Errorf("want NAME=ID,ID,..., such as billing=1,2,3")
	}
	var voters []uint64
	for _, x := range strings.Split(ids, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(x), 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("voter %q is not a positive replica ID", x)
		}
		voters = append(voters, id)
	}
	if n := len(voters); n != 1 && n != 3 && n != 5 {
		return fmt.Errorf("%d voters; a group has 1, 3 or 5 (an even count survives no more failures than one fewer)", n)
	}
	*g = append(*g, fencelock.GroupConfig{Name: name, Voters: voters})
	return nil
}

// ErrIDFile: the --id-file exists but does not hold a replica ID.
var ErrIDFile = errors.New("not a replica ID")

// identity is who this replica is: its ID, whether it joins a running
// group rather than bootstrapping one, and its raft address.
type identity struct {
	id       uint64
	join     bool
	addr     string
	fromFile bool // id came from --id-file
	implied  bool // join because the ID read from --id-file is not in --peers
}

// readIDFile reads the replica ID kept in path: a positive decimal integer,
// surrounding whitespace allowed. A missing file is (0, nil): the caller
// keeps --id. Any other failure names the file, so that a pod started with
// a broken override refuses to start rather than start as the wrong replica.
func readIDFile(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("serve: --id-file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("serve: --id-file %s: %.40q: %w (want a positive decimal integer)", path, s, ErrIDFile)
	}
	return id, nil
}

// resolveIdentity decides who this replica is from --id, --id-file,
// --join, --addr and --peers (members).
//
// An ID read from --id-file overrides --id; if it is not in --peers, the
// replica joins (a replica bootstraps only as one of the bootstrap list):
// that is how a StatefulSet pod whose volume was lost comes back under a
// new ID. An --id not in --peers must say --join: a typo in --id must not
// start a replica that waits for ever to be added.
//
// --join with an ID that is in --peers is allowed: a group grown with
// `fencelock members add` may list its new replicas in the --peers every
// pod shares. The replica joins (it must have been added first), and its
// --peers entry is its default --addr. A Dir that holds a replica that
// bootstrapped is refused by fencelock.Start (Join must match how the Dir
// first started), so --join cannot turn a bootstrapped replica into
// another.
//
// --addr is the raft address the other replicas dial; it defaults to the
// ID's --peers entry, and a replica without one needs it. A bootstrapping
// replica's --addr must be its --peers entry, as the group it bootstraps
// records that address for it.
func resolveIdentity(id uint64, idFile string, join bool, addr string, members map[uint64]string) (identity, error) {
	who := identity{id: id, join: join, addr: addr}
	if idFile != "" {
		fid, err := readIDFile(idFile)
		if err != nil {
			return identity{}, err
		}
		if fid != 0 {
			who.id, who.fromFile = fid, true
		}
	}
	if who.id == 0 {
		return identity{}, errors.New("serve: --id is required (or an --id-file that exists)")
	}
	peer, listed := members[who.id]
	if !listed && !who.join {
		if !who.fromFile {
			return identity{}, fmt.Errorf("serve: replica %d is not in --peers: give --join (and --addr) to join a running group it was added to", who.id)
		}
		who.join, who.implied = true, true
	}
	switch {
	case who.addr == "" && !listed:
		return identity{}, fmt.Errorf("serve: replica %d is not in --peers, so it needs --addr, its own raft address HOST:PORT", who.id)
	case who.addr == "":
		who.addr = peer
	case !who.join && !strings.EqualFold(strings.TrimSpace(who.addr), strings.TrimSpace(peer)):
		return identity{}, fmt.Errorf("serve: --addr %s is not replica %d's --peers entry %s: a replica that bootstraps the group is at its --peers address",
			who.addr, who.id, peer)
	}
	return who, nil
}

func serve(args []string) error {
	fs := newFlags("serve", "--id N --peers ID=HOST:PORT,... --dir DIR [flags]")
	id := fs.Uint64("id", 0, "this replica's ID (required unless --id-file exists)")
	idFile := fs.String("id-file", "", "file holding this replica's ID, which overrides --id when the file exists (a missing file: --id); an ID not in --peers joins, as --join")
	join := fs.Bool("join", false, "join a running group this replica was added to (fencelock members add) instead of bootstrapping one; --peers is then not its bootstrap list")
	raftAddr := fs.String("addr", "", "this replica's raft address HOST:PORT, as its peers dial it (default: its --peers entry; required for a replica not in --peers)")
	peers := fs.String("peers", "", "the group's bootstrap voters, ID=HOST:PORT of raft, comma-separated, the same on every replica (required)")
	dir := fs.String("dir", "", "data directory: raft log and snapshots (required)")
	httpAddr := fs.String("http", "127.0.0.1:7080", "address to serve the HTTP API on (loopback unless you mean otherwise)")
	httpPeers := fs.String("http-peers", "", "the other replicas' HTTP base URLs, ID=URL comma-separated: a call for a session another replica serves is forwarded there while it answers in time (else this replica takes the session over)")
	ttl := fs.Duration("ttl", fencelock.DefaultSessionTTL, "default TTL of sessions")
	raftListen := fs.String("raft-listen", "", "address to bind for raft when it differs from this replica's --peers address")
	raftCA := fs.String("raft-ca", "", "CA file: mutual TLS between replicas (with --raft-cert, --raft-key)")
	raftCert := fs.String("raft-cert", "", "this replica's raft certificate")
	raftKey := fs.String("raft-key", "", "this replica's raft key")
	httpCert := fs.String("http-cert", "", "serve HTTPS with this certificate (with --http-key)")
	httpKey := fs.String("http-key", "", "key of --http-cert")
	httpClientCA := fs.String("http-client-ca", "", "require HTTPS client certificates signed by this CA")
	dev := fs.Bool("dev", false, "development on one machine: admin calls from this machine need no token (--http must be a loopback address; no --tokens-file). Not for production")
	tokensFile := fs.String("tokens-file", "", "require a bearer token on every API call: lines TOKEN [RIGHT:PREFIX ...], RIGHT read, lock, elect or admin; reread on SIGHUP")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	var lim limits
	lim.register(fs)
	placement := fs.String("placement", "every", "which named groups this replica runs a raft replica of: every (a non-voting one where it does not vote) or own (only those it votes in; it reaches the others through a replica that runs them)")
	var groups groupFlags
	fs.Var(&groups, "group", "a named group beside the default one, NAME=ID,ID,... of its voters (1, 3 or 5 of --peers); repeatable, the same list on every replica")
	rest, err := parseAll(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("serve: unexpected argument %q: serve takes flags only (fencelock serve -h lists them)", rest[0])
	}
	lvl, err := parseLevel(*level)
	if err != nil {
		return err
	}
	place, err := parsePlacement(*placement)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	log.Info("fencelock: " + fencelock.BuildVersion().String())
	setMemoryLimit(log, memlimit.FromCgroup)
	members, err := parseIDMap("peers", *peers)
	if err != nil {
		return err
	}
	hp, err := parseIDMap("http-peers", *httpPeers)
	if err != nil {
		return err
	}
	switch {
	case len(members) == 0 && !*join && *idFile == "":
		return errors.New("serve: --peers is required (unless --join)")
	case *dir == "":
		return errors.New("serve: --dir is required")
	case (*raftCA != "" || *raftCert != "" || *raftKey != "") && (*raftCA == "" || *raftCert == "" || *raftKey == ""):
		return errors.New("serve: --raft-ca, --raft-cert and --raft-key go together")
	case (*httpCert == "") != (*httpKey == ""):
		return errors.New("serve: --http-cert and --http-key go together")
	case *httpClientCA != "" && *httpCert == "":
		return errors.New("serve: --http-client-ca needs --http-cert")
	}
	if err := lim.check(); err != nil {
		return err
	}
	if *raftAddr != "" {
		if err := checkHostPort(*raftAddr, "10.0.0.1:7001"); err != nil {
			return fmt.Errorf("--addr %s: %w", *raftAddr, err)
		}
	}
	who, err := resolveIdentity(*id, *idFile, *join, *raftAddr, members)
	if err != nil {
		return err
	}
	cfg := fencelock.Config{ReplicaID: who.id, Members: members, Addr: who.addr, Dir: *dir, SessionTTL: *ttl,
		ListenAddr: *raftListen, Logger: log, Groups: groups, Placement: place}
	if who.join {
		// --peers bootstrapped the group; a joining replica learns the
		// membership from it.
		cfg.Members, cfg.Join = nil, true
		why := "--join"
		if who.implied {
			why = "its ID, from --id-file, is not in --peers"
		}
		log.Info("fencelock: joining a running group", "replica", who.id, "addr", who.addr, "why", why)
	}
	if who.fromFile && who.id != *id {
		log.Info("fencelock: replica ID from --id-file", "replica", who.id, "file", *idFile, "id_flag", *id)
	}
	if *raftCA != "" {
		cfg.Transport = transport.MutualTLS(*raftCA, *raftCert, *raftKey)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var opts []httpapi.Option
	opts = append(opts, httpapi.WithLogger(log), httpapi.WithPeers(hp),
		httpapi.WithBodyTimeout(lim.body), httpapi.WithMaxStreams(lim.maxStreams))
	if *dev {
		if err := checkDev(*httpAddr, *tokensFile); err != nil {
			return err
		}
		opts = append(opts, httpapi.WithLoopbackAdmin())
		log.Warn("fencelock: --dev: admin calls from this machine need no token; not for production")
	}
	if *tokensFile != "" {
		acl, err := readTokens(*tokensFile)
		if err != nil {
			return err
		}
		opts = append(opts, httpapi.WithACL(acl))
	}
	var tlsCfg *tls.Config
	if *httpCert != "" {
		cert, err := tls.LoadX509KeyPair(*httpCert, *httpKey)
		if err != nil {
			return fmt.Errorf("--http-cert: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if *httpClientCA != "" {
			pem, err := os.ReadFile(*httpClientCA)
			if err != nil {
				return fmt.Errorf("--http-client-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--http-client-ca %s holds no PEM certificate", *httpClientCA)
			}
			tlsCfg.ClientCAs, tlsCfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
			// Forwarded calls present this replica's certificate to its
			// peers, which trust the same CA.
			opts = append(opts, httpapi.WithForwardTransport(&http.Transport{TLSClientConfig: &tls.Config{
				Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}))
		}
	}
	if err := checkHostPort(*httpAddr, "127.0.0.1:7080"); err != nil {
		return fmt.Errorf("--http %s: %w", *httpAddr, err)
	}
	// Listen before starting the replica, so that a port in use fails fast.
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// SIGHUP rereads the tokens file; caught from here on, so that it never
	// kills a replica that is starting.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	node, err := fencelock.Start(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	api := httpapi.New(node, opts...)
	srv := lim.server(api, tlsCfg, log)
	served := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			served <- srv.ServeTLS(ln, "", "")
		} else {
			served <- srv.Serve(ln)
		}
	}()
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	log.Info("fencelock: serving", "replica", who.id, "http", scheme+"://"+ln.Addr().String(), "dir", *dir)
wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("fencelock: shutting down")
			break wait
		case err = <-served:
			log.Error("fencelock: HTTP server failed", "err", err)
			break wait
		case <-hup:
			reloadTokens(api, *tokensFile, log)
		}
	}
	// Streams and waiting acquires first (they never go idle), then the
	// HTTP server lets calls in flight finish, then the replica stops.
	api.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	node.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// reloadTokens rereads the tokens file into api. A file that cannot be read
// or parsed leaves the tokens as they were, and says why: a typo must not
// lock every client out, nor let every client in.
func reloadTokens(api *httpapi.Server, path string, log *slog.Logger) {
	if path == "" {
		log.Warn("fencelock: SIGHUP: no --tokens-file to reload")
		return
	}
	acl, err := readTokens(path)
	if err != nil {
		log.Error("fencelock: SIGHUP: tokens file not reloaded; the previous tokens stay in force", "err", err)
		return
	}
	api.SetACL(acl)
	log.Info("fencelock: SIGHUP: tokens file reloaded", "tokens", acl.Len())
}
