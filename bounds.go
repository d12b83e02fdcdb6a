package fencelock

import "github.com/lni/dragonboat/v4/config"

// The bounds on what a replica holds in memory on behalf of others. Every
// input from the network or disk is bounded; see README, "Bounded inputs".
// Each limit is checked before a message is queued, so one message larger
// than the limit still passes when the queue is empty: the limits bound
// memory without ever blocking progress.
const (
	// maxQueue bounds, in bytes of entries, the messages queued to each peer
	// and those received and not yet handled (Dragonboat's defaults are
	// unlimited). Past it, messages are dropped and raft resends them.
	maxQueue = 128 << 20
	// maxInMemLog bounds the raft log entries a replica holds in memory
	// before applying them; past it proposals are refused as busy (and
	// retried), and the leader slows down for a lagging follower.
	maxInMemLog = 128 << 20
)

func boundQueues(nhc *config.NodeHostConfig) {
	nhc.MaxSendQueueSize = maxQueue
	nhc.MaxReceiveQueueSize = maxQueue
}
