package fsm

// Gate returns the log and snapshot versions the group writes: Baseline
// until a KindGate raised them (version.go).
func (st *State) Gate() Gate { return st.gate }

// raiseGate applies a KindGate: the gate takes the newer of each version,
// so it never falls, whatever order raises commit in. A gate the group may
// not write is refused, and changes nothing.
func (st *State) raiseGate(index uint64, c *Command) Result {
	g := st.gate.Max(c.Gate)
	// A gate beyond what this build reads never gets here from a log: the
	// decoder refuses its entry (ErrVersionTooNew) and the replica stops.
	if !c.Gate.Valid() || !g.Valid() || !Reads().Covers(c.Gate) {
		return Result{Status: Invalid}
	}
	if g != st.gate {
		st.gate = g
		st.emit(Event{Kind: EventGateRaised, Index: index, Gate: g})
	}
	return Result{Status: OK, Value: uint64(g.Codec)}
}
