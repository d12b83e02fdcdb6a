package fencelock

import (
	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
)

// commitFunc is how a session's background command reaches the group.
type commitFunc = session.CommitFunc

// withCommit wraps how the session's background commands (its keep-alives,
// and the close of a part its holder gave up) reach the group; tests use it
// to delay their commit. Each part gets a route of its own, so its
// keep-alives go alone, not in the node's batches.
func withCommit(wrap func(commitFunc) commitFunc) SessionOption {
	return func(s *lockapi.SessionSettings) {
		embedded(s).route = func(next session.Route) session.Route { return session.RouteFunc(wrap(next.Propose)) }
	}
}
