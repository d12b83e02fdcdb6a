package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/lockapi"
)

// Download asks the next endpoint when an answer is cut short (fewer bytes
// than its Content-Length), and the writer it is given holds one whole
// answer: the one that came whole.
func TestDownloadFailsOverOnACutAnswer(t *testing.T) {
	whole := strings.Repeat("backup", 1000)
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/livez" {
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(whole)))
		_, _ = io.WriteString(w, whole[:100]) // then the handler returns: the body ends short
	}))
	defer cut.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, whole)
	}))
	defer ok.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, Config{Endpoints: []string{cut.URL, ok.URL}})
	require.NoError(t, err)
	defer c.Close()

	var buf bytes.Buffer
	resets := 0
	err = c.Download(ctx, "/v1/snapshot", func() (io.Writer, error) {
		resets++
		buf.Reset()
		return &buf, nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, resets, "each answer starts the writer over")
	require.Equal(t, whole, buf.String())

	// An error answer is the API's, as for every call; the writer's own
	// failure ends the call, as no endpoint would do better.
	err = c.Download(ctx, "/v1/snapshot", func() (io.Writer, error) { return nil, errors.New("disk full") })
	require.ErrorContains(t, err, "disk full")
	require.NotErrorIs(t, err, lockapi.ErrUnavailable)
}

// Do makes a call this package has no method for, with the API's errors.
func TestDoAnswersAndErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/livez":
		case "/v1/groups/a":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":"fencelock: group exists","code":"group_exists"}`)
		default:
			b, _ := io.ReadAll(r.Body)
			_, _ = fmt.Fprintf(w, `{"method":%q,"body":%q}`, r.Method, b)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, Config{Endpoints: []string{srv.URL}})
	require.NoError(t, err)
	defer c.Close()
	var out struct{ Method, Body string }
	require.NoError(t, c.Do(ctx, "POST", "/v1/members", map[string]int{"id": 4}, &out))
	require.Equal(t, "POST", out.Method)
	require.JSONEq(t, `{"id":4}`, out.Body)
	err = c.Do(ctx, "POST", "/v1/groups/a", nil, nil)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "group_exists", e.Code)
	require.Equal(t, http.StatusConflict, e.Status)
}
