package serve

import "github.com/fencelock/fencelock/internal/replica/wire"

// TestingStateParts makes servers send a mirror's state in parts of part
// bytes once it is larger than whole bytes, until restore is called: a test
// mirrors a state in parts without making one larger than a call message.
// Production code never calls it.
func TestingStateParts(whole, part int) (restore func()) {
	w, p := wholeState, statePart
	wholeState, statePart = whole, min(part, wire.MaxStatePart)
	return func() { wholeState, statePart = w, p }
}

// TestingStateSends sets how many states larger than one message a server
// sends to mirrors at once, until restore is called. Production code never
// calls it.
func TestingStateSends(most int32) (restore func()) {
	old := stateSendsMost.Swap(most)
	return func() { stateSendsMost.Store(old) }
}
