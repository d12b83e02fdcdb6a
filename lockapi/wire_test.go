package lockapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An ID is written as a decimal string and read from one, from a JSON
// number, or from null (left as it was); anything else is an error.
func TestIDJSON(t *testing.T) {
	b, err := json.Marshal(AcquireResponse{Granted: true, FencingToken: 1 << 63})
	require.NoError(t, err)
	require.JSONEq(t, `{"granted":true,"fencing_token":"9223372036854775808"}`, string(b))
	var a AcquireResponse
	require.NoError(t, json.Unmarshal([]byte(`{"fencing_token": 7, "holder_session": null, "later_field": 1}`), &a))
	require.Equal(t, ID(7), a.FencingToken)
	require.Equal(t, ID(0), a.HolderSession)
	for _, bad := range []string{`"-1"`, `"x"`, `1.5`, `true`, `"18446744073709551616"`} {
		var id ID
		require.Error(t, json.Unmarshal([]byte(bad), &id), bad)
	}
}

// FuzzIDJSON: ID's reader (a plain quoted decimal read without a
// decoder) accepts and reads exactly what the reader before it did, which
// decoded every string with encoding/json (refID), and what it writes
// reads back.
func FuzzIDJSON(f *testing.F) {
	for _, seed := range []string{`"7"`, `7`, `null`, `"\u0031"`, `"-1"`, `"x"`, `1.5`, `true`, `"18446744073709551616"`,
		`"18446744073709551615"`, ` "3" `, `""`, `"`, `"1"2"`, "\"1\n\"", `"+1"`, `01`, `"01"`, `"\"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var id ID
		err := id.UnmarshalJSON(b)
		want, werr := refID(b)
		require.Equal(t, werr == nil, err == nil, "%q: %v, reference %v", b, err, werr)
		if err != nil {
			return
		}
		require.Equal(t, want, id, "%q", b)
		out, err := id.MarshalJSON()
		require.NoError(t, err)
		var back ID
		require.NoError(t, json.Unmarshal(out, &back))
		require.Equal(t, id, back)
	})
}

// refID is ID.UnmarshalJSON as it was before it read plain strings itself.
func refID(b []byte) (ID, error) {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		return 0, nil
	}
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return 0, err
		}
		s = str
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return ID(v), err
}

// An ID, in every body and answer of the API, is read from its usual
// form without allocating, and written in one allocation.
func TestIDJSONAllocations(t *testing.T) {
	var id ID
	in := []byte(`"393216"`)
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = id.UnmarshalJSON(in) }))
	require.Equal(t, ID(393216), id)
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { _, _ = id.MarshalJSON() }), 1.0)
}
