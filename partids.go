package fencelock

// How the views name a session. A Session is a part in each group it
// uses: its part in the default group is the session itself, and its ID
// there is Session.ID; a part in a named group has an ID of its own in
// that group (Session.IDIn), drawn from that group's log, which may equal
// the ID of an unrelated session of the default group. So every view of
// a holder, a waiter or a candidate shows both: SessionID, the session's
// ID, which is what EndSession, a resume token and the default group's
// views know it by; and PartID, the part's ID in the view's group, which
// is what EndSessionIn of that group takes.
//
// A named group learns a part's session when the part is opened, from a
// field of the open that the group writes only once it writes log version
// 10 (every replica of the deployment runs a build that reads it; see
// docs/operations.md, "Upgrading"). For a part opened before that, the
// session is unknown: its SessionID is 0, and its PartID names it. While no
// replica is known to read less (a deployment just started, whose leaders
// have not heard every member yet), an open waits for the raise, up to
// seconds, rather than be written without its session.

// shownIDs returns the SessionID and PartID a view shows for part, a
// session of the group the lock or election called name lives in, whose
// group recorded parent (0: none or unknown) as the session it is a part
// of.
func shownIDs(name string, part, parent uint64) (sessionID, partID uint64) {
	_, group, _ := SplitName(name)
	return shownIDsIn(group, part, parent)
}

// shownIDsIn is shownIDs for a session of group.
func shownIDsIn(group string, part, parent uint64) (sessionID, partID uint64) {
	if group == "" {
		return part, part
	}
	return parent, part
}
