package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
)

// A worker keeps its session's resume token in a file only it may read, so
// that after a restart (a crash, an OOM kill, a deploy that does not Close
// its session) it takes the session back within the TTL, with the lock it
// held and that lock's fencing token, instead of waiting a TTL for the group
// to free it. Without a token, or once the session is over, it opens a new
// one. (No Output: it needs running replicas; TestResumeSessionKeepsItsLocksAndTokens
// runs the same steps against in-process ones.)
func ExampleClient_ResumeSession() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{"http://10.0.0.1:7080", "http://10.0.0.2:7080", "http://10.0.0.3:7080"}})
	if err != nil {
		log.Fatal(err)
	}
	const tokenFile = "/var/lib/worker/session" // 0600: the token is a credential

	var s *client.Session
	if b, err := os.ReadFile(tokenFile); err == nil {
		t, err := client.ParseResumeToken(strings.TrimSpace(string(b)))
		if err == nil {
			s, err = c.ResumeSession(ctx, t)
		}
		switch {
		case err == nil:
		case errors.Is(err, fencelock.ErrSessionExpired), errors.Is(err, fencelock.ErrInvalidResumeToken):
			// Over (or not a token): its locks are free or another's.
		default:
			log.Fatal(err) // unreachable for now: try again within the TTL
		}
	}
	if s == nil {
		if s, err = c.NewSession(ctx, fencelock.WithTTL(30*time.Second)); err != nil {
			log.Fatal(err)
		}
		// Never log the token; write it where only this worker reads it.
		if err := os.WriteFile(tokenFile, []byte(s.Resume().String()), 0o600); err != nil {
			log.Fatal(err)
		}
	}

	// A lock the session held before the restart is answered at once, with
	// the same fencing token; otherwise this waits for it as usual.
	l, err := s.Acquire(ctx, "jobs/report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writing under", l.Fence())

	// Done for good: release, close, and forget the token. A worker that
	// means to be resumed exits without Close (and without the Client's).
	_ = l.Release(ctx)
	_ = s.Close(ctx)
	_ = os.Remove(tokenFile)
	c.Close()
}
