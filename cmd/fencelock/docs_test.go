package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// The Kubernetes README names the formats a rolling upgrade shows before
// and after the gate rises: they are this build's, read from the code, so
// a new format version cannot leave the README behind.
func TestKubernetesReadmeFormatsAreThisBuilds(t *testing.T) {
	doc, err := os.ReadFile("../../deploy/kubernetes/README.md")
	require.NoError(t, err)
	text := string(bytes.Join(bytes.Fields(doc), []byte(" ")))
	m := regexp.MustCompile(`\(log (\d+), snapshot (\d+), for a group that never raised its gate; this build's are log (\d+), snapshot (\d+)`).FindStringSubmatch(text)
	require.NotNil(t, m, "the README's sentence on the formats a rolling upgrade shows")
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	v := fencelock.BuildVersion()
	require.Equal(t, []int{fsm.Baseline.Codec, fsm.Baseline.Snapshot, v.Codec, v.Snapshot},
		[]int{num(m[1]), num(m[2]), num(m[3]), num(m[4])}, "deploy/kubernetes/README.md's log and snapshot formats")
}

// serve's help describes today's service: no flag's text promises the 421
// session_elsewhere answer, which no replica sends any more.
func TestServeHelpIsCurrent(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stderr := os.Stderr
	os.Stderr = w
	err = serve([]string{"-h"})
	os.Stderr = stderr
	require.NoError(t, w.Close())
	require.ErrorIs(t, err, flag.ErrHelp)
	help, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Contains(t, string(help), "-http-peers", "the help was captured")
	require.NotContains(t, string(help), "421")
	require.NotContains(t, string(help), "session_elsewhere")
}
