package client

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Every answer this client decodes comes from the network: garbage must be
// an error, never a panic.
func FuzzDecodeAnswers(f *testing.F) {
	for _, seed := range []string{
		`{"session_id":"393216","session_secret":"s3cr3t","timeout_ms":10000,"lease_ms":6000,"leases":{"":6000}}`,
		`{"granted":true,"fencing_token":"7","fence":"00000000000000ab:7","holder_session":"393216"}`,
		`{"granted":true,"fencing_token":"7","fence":"00000000000000ab:7","holder_session":"393216","lease_ms":5400}`,
		`{"granted":true,"lease_ms":"x"}`, `{"elected":true,"token":"9","lease_ms":-1}`,
		`{"granted":false,"queue_position":2,"holder_session":12}`,
		`{"elected":true,"token":"9","fence":"00000000000000ab:9","value":"10.0.0.1:80"}`,
		`{"name":"jobs/a","held":true,"holder_session":"1","fencing_token":"5","holders":[{"session_id":"1","fencing_token":"5","owner":1,"granted_at":"2026-01-02T03:04:05Z"}],"waiters":1,"queue":["2"],"waiting":[{"session_id":"2","place":1,"queued_at":"x"}]}`,
		`{"name":"e","leader":{"session_id":"1","value":"v","token":"3","elected_at":"2026-01-02T03:04:05.123Z"}}`,
		`{"name":"e","leader":null}`,
		`{"error":"session not found","code":"not_found"}`,
		`{"error":"elsewhere","code":"session_elsewhere","owner":2}`,
		"event: state\ndata: {\"name\":\"e\",\"leader\":null}\n\n: ping\n\nevent: leader\ndata: {\"leader\":{\"token\":\"1\"}}\n\n",
		`{"fencing_token":"18446744073709551616"}`, `{"fencing_token":-1}`, `null`, `[]`, ``, "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var sa sessionAnswer
		_ = decodeAnswer(b, &sa)
		var aa acquireAnswer
		if decodeAnswer(b, &aa) == nil {
			_, _ = fenceOf(aa.Fence, uint64(aa.FencingToken))
		}
		var ca campaignAnswer
		if decodeAnswer(b, &ca) == nil {
			_, _ = fenceOf(ca.Fence, uint64(ca.Token))
		}
		var lj lockJSON
		if decodeAnswer(b, &lj) == nil {
			_ = lockInfoOf(lj)
		}
		var ej electionJSON
		if decodeAnswer(b, &ej) == nil {
			_ = leaderInfoOf(ej.Leader, "e")
		}
		for _, status := range []int{400, 404, 421, 503, 502} {
			e := decodeError(status, b, status == 404, "x")
			_ = e.Error()
			_ = e.Is(ErrServer)
		}
		scanEvents(bytes.NewReader(b), func(bool) {}, func(ev sseEvent) bool {
			var oe observeEvent
			if json.Unmarshal(ev.data, &oe) == nil {
				_ = leaderInfoOf(oe.Leader, "e")
			}
			return true
		})
	})
}
