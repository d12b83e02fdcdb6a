package logtap_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest/logtap"
)

// Wait finds a line logged before the call and one logged while it waits,
// matching every part given; Records keeps the records at the Tap's level
// or above, with the logger's attributes and the record's.
func TestWaitAndRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tap := logtap.New(slog.LevelInfo)
	log := tap.Logger().With("replica", 1)
	log.Debug("below the level")
	log.Info("started", "addr", "127.0.0.1:1")
	require.Equal(t, "INFO started replica=1 addr=127.0.0.1:1", tap.Wait(t, ctx, "started", "replica=1"))

	logged := make(chan struct{})
	go func() {
		defer close(logged)
		log.Warn("refused", "peer", 2, "replica", 3)
	}()
	require.Equal(t, "WARN refused replica=1 peer=2 replica=3", tap.Wait(t, ctx, "refused", "peer=2"))
	<-logged

	require.Equal(t, []logtap.Record{
		{Level: slog.LevelInfo, Message: "started", Attrs: map[string]string{"replica": "1", "addr": "127.0.0.1:1"},
			Line: "INFO started replica=1 addr=127.0.0.1:1"},
		{Level: slog.LevelWarn, Message: "refused", Attrs: map[string]string{"replica": "3", "peer": "2"},
			Line: "WARN refused replica=1 peer=2 replica=3"},
	}, tap.Records())
}
