package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// ErrNoRedisServer means redis-server is not on PATH (Debian: apt-get
// install redis-server).
var ErrNoRedisServer = errors.New("redispeer: redis-server not found on PATH")

// server is one redis-server process the peer started: loopback only, its
// own dir, every write fsync'd before it is answered (appendfsync always),
// no RDB snapshots, no replication.
type server struct {
	cmd     *exec.Cmd
	addr    string
	done    chan error // the process's exit, once
	stopped sync.Once
}

// serverArgs are redis-server's settings for lockbench: the most durable a
// single Redis is (an AOF fsync'd before every reply), nothing else that
// writes or talks to another process.
func serverArgs(dir string, port int) []string {
	return []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", dir,
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "", // no RDB snapshots
		"--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
	}
}

// startServer starts redis-server in dir on a free loopback port and
// returns once it answers PING.
func startServer(ctx context.Context, dir string) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := lockbench.FreePort()
	if err != nil {
		return nil, err
	}
	s := &server{cmd: exec.Command(bin, serverArgs(dir, port)...),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan error, 1)}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	cl := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer cl.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cl.Ping(ctx).Err()
		if err == nil {
			return s, nil
		}
		select {
		case exit := <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("redis-server exited (%v): %s", exit, log)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s not answering: %w", s.addr, err)
		}
	}
}

// stop ends the server (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (s *server) stop() {
	s.stopped.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}
