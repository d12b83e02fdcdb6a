// Package fencelock provides distributed locks and leader election that stay
// correct under failures, without a separate lock server.
//
// The application's own replicas (3 or 5 processes, on several hosts) import
// this package and form a raft group (Dragonboat) that runs the lock state
// machine. Acquire, Release and TryAcquire are ordinary Go calls on a Session;
// every grant carries a fencing token; and a fencer at the protected
// resource (fencesql, fencefile, fencehttp, or the in-memory Fencer) refuses
// a holder once a later holder's token, claimed at its grant or carried by
// its first write, has reached it.
//
//	node, _ := fencelock.Start(ctx, fencelock.Config{ReplicaID: 1, Members: members, Dir: dir})
//	session, _ := node.NewSession(ctx)
//	lock, _ := session.Acquire(ctx, "jobs/reindex")
//	err := storage.Do("jobs/reindex", lock.Token(), write) // the resource checks the token
//	lock.Release(ctx)
//
// # Guarantees
//
// Mutual exclusion. Every state change (open session, keep-alive, acquire,
// cancel, release, expire, close) is a raft command, applied in one order on
// every replica. At most one request holds a lock exclusively at any log
// position, and no shared holder holds it then; a lock held in shared mode
// (AcquireShared) has no exclusive holder, and a semaphore
// (AcquireSemaphore) no more holders than its permits; requests of all
// modes are granted in one FIFO order (see AcquireShared). During
// a partition the minority side cannot commit, so it refuses (calls fail with
// ErrUnavailable when their context ends, or, once its group has had no
// leader for about 20 election timeouts and this replica reaches too few
// voters, with ErrNoQuorum at once, naming them) and never grants:
// fencelock is CP.
//
// Fencing tokens. A grant's token is derived from the raft log index of the
// entry that made it: the entry of the Acquire that found the lock free, or of
// the Release, Cancel, Close or Expire that passed the lock to the head of its
// queue. One entry may carry many commands, so the token of a grant made by
// the entry at index i is
//
//	token = max(previous token + 1, i × 2^16)
//
// Tokens rise strictly across the whole group: per lock, and no two grants
// share one. They never reset: the log index only grows, and the last token is
// part of every snapshot, so neither snapshots, restarts nor a full-cluster
// restart can bring a smaller one.
//
// Release needs the token: a Release whose grant is no longer current changes
// nothing and returns ErrNotHeld, so a paused holder's late release cannot
// free its successor's lock.
//
// FIFO queues, no herd. A blocked Acquire is an entry in the lock's queue in
// the state machine. When the lock is freed, the head of the queue is granted
// in the same entry, and only its caller wakes: the replica where the
// session lives sees the grant when it applies that entry. Nobody polls, and
// a release costs one commit however many wait.
//
// Sessions and expiry. A Session is kept alive by a keep-alive every TTL/3,
// each a period after the previous one was sent and without waiting for its
// answer (at most 3 in flight); its Node sends them for all its sessions
// at once, one command renewing every session due, so sessions cost the
// group keep-alive traffic per replica, not per session. Expiry is
// decided by the raft leader with its monotonic clock: it notes when it applied each session's last keep-alive,
// and when TTL passes proposes an expiry naming that keep-alive; the state
// machine applies it only if no newer keep-alive arrived. A new leader first
// commits a leader-start marker, and gives every session a full TTL from the
// moment it applied it; every expiry names its leader's marker, and the state
// machine refuses one whose marker is no longer the latest, so an expiry an
// old leader decided never applies in its successor's term. Expiry frees all of the session's locks and
// withdraws its queued requests in one entry. The state machine itself never
// reads a clock or a random source.
//
// The holder stops first. A holder gives its session up at t + TTL − margin
// by its own clock, where t is when it sent the latest keep-alive (or the
// open) the group acknowledged (margin: TTL/5 by default, at most TTL/2,
// WithSafetyMargin). The leader's timer for that keep-alive started when it
// applied it, after t, and runs a full TTL, so the holder's Lock.Done closes
// before the group can grant the lock to anyone else, as long as the two
// clocks' rates differ by less than margin/TTL. No clock synchronisation is
// assumed. A session so survives keep-alives that each take up to
// TTL − margin − TTL/3 to be acknowledged (7/15 of the TTL with the default
// margin); slower ones make the holder give it up, early, never late.
//
// The holder's clock counts suspended time where the OS offers one, and what
// a pause does depends on its kind. A pause of the process (GC, SIGSTOP, a
// throttled container) advances every clock, and a pause of the machine
// (laptop sleep, a VM suspended by its own kernel) advances Linux's
// CLOCK_BOOTTIME, on which the holder's deadline is measured on Linux, though
// not CLOCK_MONOTONIC. In both cases Done and Err check the deadline when
// called, so a holder that wakes past its TTL finds Done closed on its first
// look; a goroutine that only waits on Done sees it close within a
// keep-alive period of waking, as the runtime's timers do not count a
// suspend. On other OSes the deadline is measured on Go's monotonic clock,
// which may not count suspended time (on macOS it does not): a holder whose
// machine sleeps past its TTL can wake with Done open while the group has
// granted on. A hypervisor that stops or migrates a VM without its kernel
// knowing is seen only as far as the guest's clocks advance across it, which
// depends on the hypervisor. In every case a process can also pause after
// checking Done and before writing: that is what the Fencer is for.
//
// Leader election. Session.Campaign queues a candidate in an election (a
// namespace apart from locks) and returns a Leadership once elected; the next
// candidate in line leads when the leader resigns or its session ends, with a
// larger token that serves as the term's epoch. Leadership.Done closes by the
// leader's own clock like Lock.Done, so the old leader stops before the group
// can elect another. Node.Leader reads the leader; Node.Observe follows it
// from the entries the local replica applies.
//
// At most once. Calls retry through leader changes and timeouts until their
// context ends. Every command is applied at most once: a session's requests
// are numbered, and the state machine remembers each reply until the client
// has seen it, however long that takes. It never forgets one to make room:
// a session with MaxPendingPerSession requests in flight is refused the next
// with ErrTooManyPending instead.
//
// Durability. The raft log and snapshots live in Config.Dir; a replica
// restarted on its Dir recovers its state, and one that fell behind the
// compacted log catches up from a snapshot.
//
// # Leader election, in detail
//
// Election is built on the lock machinery, in a namespace of its own:
// an election is a lock whose holder is the leader and carries a value.
//
//   - Candidates queue in FIFO order in the state machine. When the leader
//     resigns or its session ends, the head of the queue leads in the same
//     raft entry, and only its caller wakes: one grant per change of leader,
//     however many candidates and observers there are.
//   - A term's token is a fencing token like a lock's: it rises strictly with
//     every grant in the group, so it is the term's epoch. Every action the
//     leader takes downstream carries it, and a resource that refuses lower
//     tokens (Fencer) refuses an old leader once a successor's token has
//     reached it (the successor's first write, or a claim of its token).
//   - The leader stops first. Leadership.Done closes when the leader's
//     session could not be renewed by TTL − margin on the leader's own
//     clock (boot time on Linux; see WithSafetyMargin), before the group can expire the
//     session and elect the next candidate. This assumes only that the
//     leader's and the raft leader's clocks run at rates that differ by less
//     than margin/TTL (20% with the default margin of TTL/5), plus the
//     leader's delay in noticing; clocks need not be synchronised. It errs
//     toward a gap without a leader, never toward two. A leader that pauses
//     between checking Done and acting is what the token is for.
//
// # Failures
//
//   - Holder crash: its session expires one TTL after the leader last heard
//     from it; its locks pass to their queues' heads with larger tokens.
//   - Holder pause (GC, SIGSTOP, VM freeze, suspend): Lock.Done closes by
//     the holder's clock; the group expires the session and grants on; the
//     paused holder's late writes are refused by the resource's fencer, its
//     late Release by the group. A select already waiting on Done may, on
//     waking, take another ready case first: check Err, or GrantErr(ctx),
//     immediately before each write.
//   - Leader loss: a new leader is elected in about one election timeout;
//     held locks stay held; calls in flight are retried; every session gets a
//     full TTL from the new leader.
//   - Quorum loss: nothing is granted, released or renewed; holders keep their
//     locks until their own deadline passes (Done closes), after which the
//     group, once back, expires them.
//   - Clock jumps: timers use monotonic clocks; a wall-clock jump neither
//     expires nor extends a session.
//
// # Groups
//
// A name addresses its group: "jobs/reindex@billing" lives in the group
// billing, a name without '@' in the default group. '@' is reserved: after
// a name's last '@' must come the name of one of the deployment's groups,
// else the call fails with ErrUnknownGroup, so a typo never falls back to a
// group where the lock would exclude nothing. Every call that takes a lock
// or election name routes by it; Locks lists one group (its prefix may
// carry "@group"). A group stores each name whole, suffix and all, so
// Inspect, Locks and Watch report the name the caller used.
//
// The deployment's named groups are its group table, replicated by the
// default group: Config.Groups seeds it, and Node.CreateGroup, DropGroup
// and SetVoters change it online; every replica starts and stops groups as
// it applies a change, with no restart (docs/operations.md, "Many
// groups").
//
// One Session spans the groups. NewSession opens its part in the default
// group (its ID, and the open's errors, are the Session's); the first call
// naming another group opens the session's part there, one round trip.
// Each part has its own ID in its group, keep-alives (batched per group and
// replica), deadline and lost signal, and a grant belongs to its part: when
// a group cannot renew a part for TTL − margin (it lost its quorum, say),
// the Locks and Leaderships held there close their Done by the holder's
// clock, and nothing held in other groups is touched; the next call naming
// that group opens a new part.
//
// Session.Done and Session.Err describe the session as a whole, which is
// its default part: Done closes, and Err says why, when the session is
// closed (ErrSessionClosed), when its node closes (ErrClosed), or when its
// default part ends: not renewed by its deadline (ErrSessionExpired), ended
// by an operator (ErrRevoked), its replica removed (ErrRemoved). Then
// every part ends with it, and the parts still open at their groups are
// closed there. The end of a part in a named group does not close Done:
// that group's grants say so on their own Done and Err, and the session
// keeps serving the other groups. The default group is the exception: a
// session whose default part cannot be renewed (the default group lost its
// quorum for TTL − margin) is over, and its grants in every group end with
// it. The rule is the default group's because that is where the session
// was opened and what its ID names (NewSession's errors, resume tokens,
// EndSession, the HTTP API's session_id), and because the default group is
// the one whose voters are all of Members: it loses its quorum only when
// most of the deployment's hosts are gone, when the named groups' voters
// mostly are too. "Every part ended" would leave Done open on a session
// whose ID the group already expired.
//
// Session.ID is the default part's ID; Session.IDIn(group) the part's ID in
// another group, which that group's views (Inspect, Locks, SessionsIn,
// Candidates) show. The views describe one group each: a name's or a
// prefix's "@group", or the group SessionsIn, MembersOf and EndSessionIn
// are given. Node.EndSession(ctx, s.ID()) ends a whole session;
// Node.EndSessionIn ends one part.
//
// Tokens are per group: a grant's token comes from its own group's log and
// Lock.Fence().Group is that group's ID, so a resource is fenced by the
// locks of one group: once a grant of one group has keyed it, a Fencer
// (and fencesql, fencefile, fencehttp) refuses the grants of every other
// group of the deployment with ErrOtherGroup, however large their tokens.
// Guard each resource with names of one group.
//
// # Observing
//
// Config.TracerProvider (default: OpenTelemetry's global provider) traces
// every Acquire, TryAcquire (each mode), Campaign, TryCampaign, Release and
// Resign: one span per call, a child of the span in its context, with the
// name, mode, group, result, token, place in the queue at entry and time
// waited, and a child span per raft proposal. Node.Stats counts, per group,
// how long this process's lock calls waited and held, and how many were
// granted, timed out or were cancelled, and which elections it leads;
// package metrics exports both these and the replica's figures to
// Prometheus. docs/operations.md lists the attributes and metrics.
//
// # Limits
//
// A group keeps at most MaxSessions sessions; a session holds and waits
// for at most MaxLocksPerSession locks; a lock queues at most
// MaxWaitersPerLock requests. A request beyond a limit changes nothing
// and fails with an error wrapping ErrLimitExceeded. The README lists every
// limit, and the faults fencelock is tested against with what holds under
// each.
package fencelock
