package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
)

// report is the application. It is written against fencelock.Locker, so it
// runs the same in a process that is a replica (a *fencelock.Session) and in
// one that is a client of the service (a *client.Session).
func report(ctx context.Context, s fencelock.Locker, storage *fencelock.Fencer) error {
	l, err := s.Lock(ctx, "jobs/report")
	if err != nil {
		return err
	}
	defer l.Release(ctx)
	if _, err := s.TryLock(ctx, "jobs/report"); !errors.Is(err, fencelock.ErrLocked) {
		return fmt.Errorf("a second holder: %v", err)
	}
	// The resource admits the holder's fence, and refuses a late one.
	err = storage.DoFence("report.csv", l.Fence(), func() error {
		fmt.Println("wrote report.csv under", l.Name())
		return nil
	})
	if err != nil {
		return err
	}
	term, err := s.Lead(ctx, "reports/leader", "worker-1")
	if err != nil {
		return err
	}
	fmt.Println("led", "reports/leader", "as", term.Value())
	return term.Resign(ctx)
}

// The same application runs embedded and through the service: only the
// constructor of its session differs.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	storage := fencelock.NewFencer()

	// Embedded: this process runs a replica of a (one-replica) group.
	node, stopNode := startOne(ctx)
	defer stopNode()
	embedded, err := node.NewSession(ctx, fencelock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer embedded.Close(ctx)
	if err := report(ctx, embedded, storage); err != nil {
		log.Fatal(err)
	}

	// Remote: three `fencelock serve` processes; this process is none of them.
	endpoints, stopServe := startServe(3)
	defer stopServe()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	remote, err := c.NewSession(ctx, fencelock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer remote.Close(ctx)
	// Another group, another resource: a fence is keyed to its group.
	if err := report(ctx, remote, fencelock.NewFencer()); err != nil {
		log.Fatal(err)
	}
	// Output:
	// wrote report.csv under jobs/report
	// led reports/leader as worker-1
	// wrote report.csv under jobs/report
	// led reports/leader as worker-1
}

// startOne starts a one-replica group in this process.
func startOne(ctx context.Context) (*fencelock.Node, func()) {
	dir, err := os.MkdirTemp("", "fencelock-example-")
	if err != nil {
		log.Fatal(err)
	}
	node, err := fencelock.Start(ctx, fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: freePort()},
		Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	return node, func() { node.Close(); os.RemoveAll(dir) }
}

// startServe builds the fencelock command and starts n `fencelock serve`
// replicas of one group on loopback, as cmd/fencelock's tests do, and
// returns their API base URLs once each is ready.
func startServe(n int) ([]string, func()) {
	dir, err := os.MkdirTemp("", "fencelock-serve-")
	if err != nil {
		log.Fatal(err)
	}
	bin := filepath.Join(dir, "fencelock")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/fencelock").CombinedOutput(); err != nil {
		log.Fatalf("go build: %v\n%s", err, out)
	}
	var peers, httpPeers, urls []string
	httpAddrs := make([]string, n)
	for i := range n {
		httpAddrs[i] = freePort()
		urls = append(urls, "http://"+httpAddrs[i])
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, freePort()))
		httpPeers = append(httpPeers, fmt.Sprintf("%d=%s", i+1, urls[i]))
	}
	var cmds []*exec.Cmd
	for i := range n {
		cmd := exec.Command(bin, "serve", "--id", fmt.Sprint(i+1), "--peers", strings.Join(peers, ","),
			"--http-peers", strings.Join(httpPeers, ","), "--dir", filepath.Join(dir, fmt.Sprint(i+1)),
			"--http", httpAddrs[i], "--log-level", "error")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	stop := func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, cmd := range cmds {
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		os.RemoveAll(dir)
	}
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for _, u := range urls {
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := hc.Get(u + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				stop()
				log.Fatalf("%s not ready", u)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return urls, stop
}

// freePort is a free loopback address below Linux's ephemeral range
// (32768-60999), so that no kernel-chosen port takes it before the replica
// listens on it.
func freePort() string {
	for range 1000 {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(22000)))
		if err == nil {
			addr := l.Addr().String()
			l.Close()
			return addr
		}
	}
	log.Fatal("no free loopback port below the ephemeral range")
	return ""
}
