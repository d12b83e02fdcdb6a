package fencelocktest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
)

// A test of code that holds locks, against three replicas in the test's
// process: the lock survives the loss of its group's leader, and the next
// holder's token is larger.
func ExampleNewCluster() {
	t := newExampleT() // in a test: the *testing.T it is given
	defer t.cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c := fencelocktest.NewCluster(t, 3)
	leader := c.Leader(ctx)
	follower := leader%3 + 1
	s, err := c.Node(follower).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}

	c.Crash(leader) // as its process would die
	fmt.Println("new leader:", c.Leader(ctx) != leader)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c.Restart(leader)
	next, err := s.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("larger token:", next.Token() > l.Token())
	// Output:
	// new leader: true
	// larger token: true
}

// A replica cut off from the others (a partition, or a Freeze) cannot
// grant; the group's majority goes on.
func ExampleCluster_Partition() {
	t := newExampleT()
	defer t.cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c := fencelocktest.NewCluster(t, 3)
	leader := c.Leader(ctx)
	minority := leader%3 + 1
	s, err := c.Node(minority).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	others := []uint64{}
	for id := uint64(1); id <= 3; id++ {
		if id != minority {
			others = append(others, id)
		}
	}
	c.Partition([]uint64{minority}, others)
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	_, err = s.Acquire(short, "job")
	fmt.Println("the minority grants nothing:", err != nil)

	c.Heal()
	_, err = s.Acquire(ctx, "another") // "job" may be granted once healed
	fmt.Println("after Heal:", err)
	// Output:
	// the minority grants nothing: true
	// after Heal: <nil>
}

// A test over the HTTP API against three `fencelock serve` processes, one
// of them hung (SIGSTOP) for a while.
func ExampleStartServe() {
	t := newExampleT()
	defer t.cleanup()

	p := fencelocktest.StartServe(t)
	p.Freeze(2) // a host that hangs: its port accepts, nothing answers
	p.Thaw(2)
	p.Kill(3) // a crash
	p.Restart(3)
	for id := uint64(1); id <= 3; id++ {
		resp, err := http.Get(p.URLs[id] + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(id, resp.StatusCode)
	}
	// Output:
	// 1 200
	// 2 200
	// 3 200
}

// exampleT stands in for the *testing.T that a test is given and an
// Example is not: the kit calls only these of testing.TB's methods.
type exampleT struct {
	testing.TB // nil: any other method panics
	cleanups   []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()                         {}
func (t *exampleT) Failed() bool                    { return false }
func (t *exampleT) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t *exampleT) Fatal(args ...any)               { panic(fmt.Sprint(args...)) }
func (t *exampleT) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "fencelocktest-example-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// cleanup runs what was registered, last first, as a test's end does.
func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
