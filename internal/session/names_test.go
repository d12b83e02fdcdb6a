package session

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/replica"
)

// Route takes a name to the group after its last '@' and that group's
// replica here; a group this process does not run, or a name ending in
// '@', is the Config's UnknownGroup, never the default group.
func TestRoute(t *testing.T) {
	def, b := &replica.Replica{}, &replica.Replica{} // only compared, never run
	h := NewHost(Config{Log: quiet, Groups: &testGroups{m: map[string]Group{"": def, "b": b}}, UnknownGroup: errUnknown})
	defer h.Close(replica.ErrClosed)
	for name, want := range map[string]struct {
		group string
		r     *replica.Replica
	}{
		"x":       {"", def},
		"x@b":     {"b", b},
		"a@c@b":   {"b", b},
		"mail@b@": {"", nil},
		"x@c":     {"", nil},
		"x@B":     {"", nil},
	} {
		group, r, err := h.Route(context.Background(), name)
		if want.r == nil {
			require.ErrorIs(t, err, errUnknown, name)
			require.Contains(t, err.Error(), name, "the error names the name")
			continue
		}
		require.NoError(t, err, name)
		require.Equal(t, want.group, group, name)
		require.Same(t, want.r, r, name)
	}
	_, err := h.Group(context.Background(), strings.Repeat("g", 100))
	require.ErrorIs(t, err, errUnknown)
	require.Contains(t, err.Error(), strings.Repeat("g", 64)+"…", "a long group name is cut")

	// The calls that take a name check it before they route it.
	for _, name := range []string{"", "a\x00b@b", strings.Repeat("n", MaxNameLen+1)} {
		_, _, err := h.route(context.Background(), name)
		require.ErrorIs(t, err, ErrInvalidName, "%q", name)
	}
	require.ErrorIs(t, h.CheckCampaign("e@b", strings.Repeat("v", MaxValueLen+1)), ErrValueTooLarge)
	require.ErrorIs(t, h.CheckCampaign("e@c", "v"), errUnknown)
	require.NoError(t, h.CheckCampaign("e@b", strings.Repeat("v", MaxValueLen)))
}

// A refused name says why, with its length and the limit when it is too
// long, in every API (they all call fsm.NameProblem).
func TestNameErrorSaysWhy(t *testing.T) {
	for name, why := range map[string]string{
		"":                        "empty",
		strings.Repeat("a", 513):  "513 bytes, at most 512",
		"a\x00b":                  "contains NUL",
		string([]byte{0xff, 'a'}): "not UTF-8",
	} {
		err := checkName(name)
		require.ErrorIs(t, err, ErrInvalidName)
		require.ErrorContains(t, err, why)
	}
	require.NoError(t, checkName(strings.Repeat("a", 512)))
}
