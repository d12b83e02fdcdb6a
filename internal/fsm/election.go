package fsm

// An election is a lock in its own namespace whose holder is the leader and
// carries a value. Candidates queue in FIFO order like waiters do: when the
// leader resigns, is cancelled or its session ends, the head of the queue
// leads in the same entry, with a larger token, which is the term's epoch.
// So every change of leader is exactly one grant, however many candidates
// wait.

// MaxValueLen is the longest value a leader may carry, in bytes.
const MaxValueLen = 4096

func (st *State) campaign(index uint64, s *session, c *Command) Result {
	if !ValidName(c.Name) || len(c.Value) > MaxValueLen || c.MaxHold > MaxHoldLimit {
		return Result{Status: Invalid}
	}
	if s.requests() >= MaxLocksPerSession {
		return limitExceeded(LimitLocksPerSession)
	}
	e := st.elections.get(c.Name)
	if e != nil && e.holders.n != 0 && c.Wait && e.waiters() >= MaxWaitersPerLock {
		return limitExceeded(LimitWaitersPerLock)
	}
	if e == nil {
		e = &lock{name: c.Name, election: true}
		st.elections.add(e)
	}
	if e.holders.n == 0 {
		return Result{Status: Granted, Value: st.grant(index, e, s, c.Seq, false, c.Value, c.MaxHold)}
	}
	if !c.Wait {
		return Result{Status: Locked}
	}
	w := &waiter{s: s, seq: c.Seq, value: c.Value, maxHold: c.MaxHold, at: st.at}
	st.enqueue(e, w)
	s.campaigns[c.Seq] = w
	st.campaigning++
	st.emit(Event{Kind: EventQueued, Session: s.id, Seq: c.Seq, Name: c.Name, Election: true})
	return Result{Status: Queued}
}

func (st *State) resign(index uint64, s *session, c *Command) Result {
	h := st.leader(s, c.Name, c.Token)
	if h == nil {
		return Result{Status: NotHeld}
	}
	st.free(index, h, ReasonReleased)
	return Result{Status: OK}
}

// proclaim replaces the leader's value; the term and its token stay.
func (st *State) proclaim(s *session, c *Command) Result {
	if len(c.Value) > MaxValueLen {
		return Result{Status: Invalid}
	}
	h := st.leader(s, c.Name, c.Token)
	if h == nil {
		return Result{Status: NotHeld}
	}
	h.l.setValue(c.Value)
	st.emit(Event{Kind: EventProclaimed, Session: s.id, Seq: h.seq, Token: h.token, Name: h.l.name, Value: c.Value,
		SessionName: s.name, At: h.at, Parent: s.parent})
	return Result{Status: OK}
}

// leader returns the leadership of election name if s leads it with token.
func (st *State) leader(s *session, name string, token uint64) *hold {
	e := st.elections.get(name)
	if e == nil {
		return nil
	}
	if h := e.oldest(); h != nil && h.s == s && h.token == token {
		return h
	}
	return nil
}
