// Package transport holds the ways fencelock replicas can talk to each other.
//
// A Transport adjusts the Dragonboat NodeHost configuration of one replica
// before it starts. The default, used when fencelock.Config.Transport is nil,
// is TCP: Dragonboat's built-in transport, listening on the replica's raft
// address (or Config.ListenAddr).
package transport

import "github.com/lni/dragonboat/v4/config"

// Transport configures how one replica sends and receives raft messages.
type Transport interface {
	// Configure sets the transport fields of the replica's NodeHost
	// configuration.
	Configure(nhc *config.NodeHostConfig) error
}

// TCP returns Dragonboat's built-in TCP transport, the default.
func TCP() Transport { return tcp{} }

type tcp struct{}

func (tcp) Configure(*config.NodeHostConfig) error { return nil }
