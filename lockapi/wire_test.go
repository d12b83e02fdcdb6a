package lockapi

import (
	"encoding/json"
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
