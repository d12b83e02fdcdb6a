package fencehttp

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// waitingFencer is a *fencelock.Fencer that reports each DoFence call
// before it waits for the resource's check: the test's way to know that a
// request has reached the fence.
type waitingFencer struct {
	*fencelock.Fencer
	entered chan uint64
}

func (f waitingFencer) DoFence(resource string, fence fencelock.Fence, write func() error) error {
	f.entered <- fence.Token
	return f.Fencer.DoFence(resource, fence, write)
}

// The probe: a request with token 34 is admitted and its handler
// stalls; then 35 arrives. Before, 35 was admitted and served while 34's
// handler still ran, and the effects landed in the order [35 34]. With an
// in-process Fencer the handler runs inside the fence: 35 waits at the
// fence until 34's handler is done, so the effects land [34 35]; and a
// lower token arriving after 35's admission is refused, never served.
func TestMiddlewareRunsTheHandlerInsideTheFence(t *testing.T) {
	fencer := waitingFencer{fencelock.NewFencer(), make(chan uint64, 8)}
	var mu sync.Mutex
	var effects []uint64
	stalled := make(chan struct{}) // 34's handler is running
	release := make(chan struct{}) // 34's handler may land its effect
	srv := httptest.NewServer(Middleware(fencer, func(*http.Request) string { return "res" },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f, _ := Fence(r)
			if f.Token == 34 {
				close(stalled)
				<-release
			}
			mu.Lock()
			effects = append(effects, f.Token)
			mu.Unlock()
		})))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	send := func(token string) <-chan int {
		code := make(chan int, 1)
		go func() {
			req, err := http.NewRequest("POST", srv.URL+"/res", nil)
			if err != nil {
				t.Error(err)
				code <- 0
				return
			}
			req.Header.Set(Header, token)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				code <- 0
				return
			}
			resp.Body.Close()
			code <- resp.StatusCode
		}()
		return code
	}
	deadline := time.After(time.Minute) // generous: a correctness test, not a speed one

	code34 := send("000000000000feed:34")
	select {
	case <-stalled:
	case <-deadline:
		t.Fatal("34's handler never ran")
	}
	code35 := send("000000000000feed:35")
	// Either 35 is served while 34's handler is stalled (the defect: its
	// effect lands first), or it reaches the fence and waits there.
	early := 0
waiting:
	for {
		select {
		case early = <-code35:
			break waiting
		case tok := <-fencer.entered:
			if tok == 35 {
				break waiting
			}
		case <-deadline:
			t.Fatal("35 neither served nor at the fence")
		}
	}
	close(release)
	c34 := <-code34
	c35 := early
	if c35 == 0 {
		c35 = <-code35
	}
	require.Equal(t, http.StatusOK, c34)
	require.Equal(t, http.StatusOK, c35)
	mu.Lock()
	require.Equal(t, []uint64{34, 35}, effects, "the lower token's effect never lands after the higher one was admitted")
	mu.Unlock()

	require.Equal(t, http.StatusConflict, <-send("000000000000feed:34"), "once 35 is admitted, 34 is refused")
	mu.Lock()
	require.Equal(t, []uint64{34, 35}, effects)
	mu.Unlock()
}
