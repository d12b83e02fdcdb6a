package lockapi

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The leaf's bounds are written out so that a client links no state
// machine; they must stay the state machine's.
func TestBoundsAreTheStateMachines(t *testing.T) {
	for name, c := range map[string][2]int64{
		"MaxNameLen":        {MaxNameLen, fsm.MaxNameLen},
		"MaxValueLen":       {MaxValueLen, fsm.MaxValueLen},
		"MaxSessionNameLen": {MaxSessionNameLen, fsm.MaxSessionNameLen},
		"MaxHoldersPerLock": {MaxHoldersPerLock, fsm.MaxHoldersPerLock},
		"MaxContended":      {MaxContended, fsm.MaxContended},
		"MaxHoldLimit":      {int64(MaxHoldLimit), fsm.MaxHoldLimit},
	} {
		require.Equal(t, c[1], c[0], name)
	}
}

// A name the leaf's checks pass is one the state machine takes, and the
// reason a refusal gives is the state machine's.
func TestChecksAreTheStateMachines(t *testing.T) {
	names := []string{"", "a", "jobs/a@billing", strings.Repeat("x", fsm.MaxNameLen),
		strings.Repeat("x", fsm.MaxNameLen+1), "bad\xff", "nul\x00", strings.Repeat("é", 200),
		strings.Repeat("y", fsm.MaxSessionNameLen), strings.Repeat("y", fsm.MaxSessionNameLen+1)}
	for _, n := range names {
		require.Equal(t, fsm.NameProblem(n), NameProblem(n), "%.20q", n)
		err := CheckName(n)
		why := fsm.NameProblem(n)
		require.Equal(t, why == "", err == nil, "%.20q", n)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidName)
			require.True(t, strings.HasSuffix(err.Error(), ": "+why), "%v does not end in %q", err, why)
		}
		serr, ferr := CheckSessionName(n), fsm.CheckSessionName(n)
		require.Equal(t, ferr == nil, serr == nil, "%.20q", n)
		if serr != nil {
			require.ErrorIs(t, serr, ErrInvalidSessionName)
			require.Equal(t, strings.TrimPrefix(ferr.Error(), fsm.ErrInvalidSessionName.Error()),
				strings.TrimPrefix(serr.Error(), ErrInvalidSessionName.Error()))
		}
	}
	require.NoError(t, CheckValue(strings.Repeat("v", fsm.MaxValueLen)))
	require.ErrorIs(t, CheckValue(strings.Repeat("v", fsm.MaxValueLen+1)), ErrValueTooLarge)
}

func TestOptionsRead(t *testing.T) {
	var got []int
	a := ReadAcquireOptions(nil, WithMaxHold(time.Minute), WithQueuePosition(func(p int) { got = append(got, p) }))
	require.Equal(t, time.Minute, a.MaxHold)
	a.QueuePosition(3)
	require.Equal(t, []int{3}, got)

	s := SessionSettings{TTL: time.Second}
	ApplySessionOptions(&s, nil, WithSessionName("w"), WithLockDelay(time.Millisecond))
	require.Equal(t, SessionSettings{TTL: time.Second, Name: "w", Named: true, LockDelay: time.Millisecond}, s)
	require.Equal(t, 2*time.Second, ReadSessionOptions(WithTTL(2*time.Second), WithSafetyMargin(0)).TTL)
}

func TestParseFence(t *testing.T) {
	f, err := ParseFence(Fence{Group: 0xab, Token: 7}.String())
	require.NoError(t, err)
	require.Equal(t, Fence{Group: 0xab, Token: 7}, f)
	for _, s := range []string{"", "0", "x", "ab:1", "00000000000000ab:0"} {
		_, err := ParseFence(s)
		require.True(t, errors.Is(err, ErrInvalidFence), "%q: %v", s, err)
	}
}
