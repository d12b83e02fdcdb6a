// Package checker proves fencelock's guarantees under faults, the way
// Jepsen and etcd's robustness tests do: it runs real replicas (in this
// process, on real data dirs, over the fault-injecting transport.Network),
// drives clients that acquire a lock, write to a shared register through a
// Fencer and release it, clients that do the same on a shared/exclusive
// lock and a counting semaphore, and clients that campaign in elections, write as
// leader through the Fencer and proclaim, while observers follow the
// elections; lets a nemesis inject faults, records every operation with its
// call and return times, and checks the history.
//
// It is a test harness, not part of the API: it drives the public package as
// a user's program does (with internal/testhook for the faults), so it sits
// beside the root rather than under internal/, below it.
//
// # Groups
//
// Every scenario runs two named groups beside the default one (groups.go):
// on 5 replicas "a" voted by 1,2,3 and "b" by 3,4,5, so that each has a
// voter set of its own and one can lose its quorum while the others keep
// theirs; on 3 replicas both are voted by all three. Every replica runs
// every group (a non-voter where it does not vote), so a client's session
// on any replica takes locks in any group ("register/a@a"); its part in a
// group ends alone when that group cannot renew it.
//
// One scenario stands apart: the restore (restore.go, RunRestore) takes a
// backup under load, stops every replica, restores a new deployment from
// it and delivers the old holders' writes late. A restore rolls the groups
// back by design, so the history checks below do not span it; it checks
// its own promise, that no fence is granted twice and that the resources
// admit no old fence after a restored holder wrote.
//
// # Workload
//
// N clients (default 6), each one application process with its own session
// (TTL 1.5s) on its home replica (another one while its home is down),
// contend for four locks: two in the default group, "register/a@a" in
// group a and "register/b@b" in group b. Each loop: Acquire (or, one time in four,
// TryAcquire) with a 2s deadline, then three fenced writes to the lock's
// register, checking Lock.Done before each, then Release. Two slow clients
// hold a fifth lock (default group) for two TTLs at a time, with Acquire
// only; the second one's sessions have a lock-delay of TTL/3
// (WithLockDelay, check 12). Clients 2 and 5 keep their sessions alive
// themselves (WithExternalKeepAlive, external.go): a keeper calls
// KeepAlive every TTL/3, as a remote client's heartbeats would reach its
// replica, and checks KeepAlive's contract (check 11); they take no
// pauses. The recipes and the elections below live in the default group.
//
// Recipe clients (recipe.go) run the shared/exclusive lock and the
// counting semaphore in every scenario, with sessions like the others: on
// "rw/a", 2 writers (Acquire, one time in four TryAcquire) and 3 readers
// (AcquireShared, one time in four TryAcquireShared); on "sem/a", 3
// clients taking one of its 2 permits (AcquireSemaphore, one time in four
// TryAcquireSemaphore). Each section is three steps, checking Lock.Done
// before each: a writer's is a fenced write to the lock's register; a
// reader's reads the register's mark (the highest token the Fencer
// admitted) without raising it, since shared holders are not fenced
// against each other; a permit's is the work alone. They restart mid-
// section like the others, and the nemesis may freeze them; the operator
// does not revoke their grants.
//
// One write step in 24, a client holding a lock or leading restarts its
// process (resume.go): it resumes its session on another replica with the
// token the old process saved (ResumeSession), records what the resume
// kept of its grant (a Kept operation), and goes on under it; the old
// Session is dropped unclosed, and the group tells it its session is over.
//
// An operator (operator.go) acts every half to one and a half TTLs: it
// revokes a lock's grant by the token a read showed it (RevokeGrant) or
// whatever grant is current (Revoke), revokes an election's term
// (RevokeLeadership), or ends a random live session (EndSession), whose
// holder must then find it over within 30s. A holder it revokes is not
// bound to stop first (its replica may apply the revocation after the
// next holder's does), but the Fencer must refuse its late writes. Which
// grants a revocation ended is read from the group's applied log
// (applied.go), so the exemption covers those alone: a successor granted
// while the revocation was in flight, the one it granted included, is
// checked in full.
//
// Four election clients (elect.go; sessions like the others) campaign in
// two elections, so candidates queue behind leaders. Each loop: one time in
// two a Node.Leader read, then Campaign (one time in four TryCampaign) with
// a value (deadline 4 TTLs); as
// leader, four steps of a fenced write with the term's epoch (the
// Leadership's token) to the election's register and a Proclaim of a new
// value, checking Leadership.Done before each and waiting TTL/30 between
// them; then Resign. Values are "c<client>/<n>" with n rising, so the order
// of a term's values can be told. A Proclaim is bounded by the term (it
// gives up when Done closes), not by a timeout shorter than the TTL. Four
// observers (observe.go), two per election on different replicas, follow
// the elections with Node.Observe from the start until the final check,
// observing again on another replica when theirs stops.
//
// # Faults (nemesis.go)
//
// The first fault waits (at most 30s) until the workload runs in full: a
// lock granted in every group, a term of leadership, and the recipes'
// coverage. Then:
// leader crash and restart, follower crash and restart from disk, leader
// isolated, partitions with the leader in the minority or in the majority,
// lossy links (5% loss), slow links (20-40ms), the replica of a holder cut
// off mid-section (a slow-lock holder, then a leader at the start of its
// term), a client frozen in its critical section or term for 2.5 TTLs
// (testhook.Pause: its whole process, timers and all; on waking it writes
// without looking at Done), full-cluster restart, a follower that catches
// up by snapshot, wall-clock jumps of +1h and -2h on every replica and
// client, one lagging replica (every message into it delayed 60ms) while
// the groups' leaderships move and the operator revokes and ends sessions
// and parts in step with each transfer (lagging.go), and one group's
// quorum lost (one-group-quorum, on 5 replicas, beside a second holder
// whose session only KeepAlive renews):
// the replicas a named group needs for its quorum (1 and 2 for group a)
// stop while the other groups keep theirs (their leaders moved off 1 and 2
// first, so that the fault is the one group's alone). That fault checks that the
// failure stays inside the group: every other group grants a fresh lock
// from a surviving replica within 20s (a count of grants, not a speed); a
// session on a surviving replica that held a lock in every group before the
// fault keeps its locks outside the lost group (Done open, and the group's
// read shows the same token) while its lock in the lost group closes Done
// by its own clock; the lost group grants nothing to calls made meanwhile;
// once the replicas return it grants again. After any partition heals,
// every replica of the cut-off side must grant again in every group.
//
// Clocks whose rates differ (clockrate.go, Scenario.Rates: each replica's
// clock, its leader timers and its sessions' deadlines alike, runs at its
// own rate, internal/clock.Rated): skewed-holder-isolated moves the default
// group's leadership to the fastest replica and cuts off the slowest one
// just after a keep-alive of its slow-lock holder was acknowledged, so the
// holder's deadline and the leader's expiry time one keep-alive on clocks
// that disagree. Within the margin's promise (clock-rates: 7% slow under
// 7% fast, TTL 3s) the holder stops first; beyond it (TestClockRatesBeyondTheMargin:
// 20% and 20%) check 2 says it does not. The lagging replica's operator
// acts through the lagging replica every other time, a dashboard reads the
// elections' leaders through it every TTL/15 (client -3), and
// operator-lost-replies revokes through a follower whose incoming links are
// cut for 700ms, so that its proposal commits unseen and its retry follows
// (check 13).
//
// Mirrors and the group table (mirrors.go, table.go; PlaceOwnGroups on 5
// replicas): mirror-voter-cut cuts the voter that feeds a mirror off from
// the rest of its group while the mirror's host still reaches it (an
// asymmetric partition), and checks that the mirror moves to another
// voter and its replica grants there within failoverBound, that a lock
// held through the mirror stays held, and that every replica answers a
// call in every group, or fails it with a named error, within its
// deadline (answersWithin). group-moves moves a named group's voters onto
// a replica that reached it through a mirror while one of its voters is
// down (removed while down: it must learn it when it restarts), then off
// it again; removed-while-down runs the same under PlaceEveryGroup, where
// a replica taken off answers ErrGroupMoved. drop-create drops a group
// and creates it again under its name, twice. Their contenders, on every
// replica, hold, wait for and campaign in the group and write through a
// Fencer of their own: each grant's token is above every fence of its
// group the resource admitted before its call (tokens rise across every
// move), no fence (group ID, token) is granted twice over the
// incarnations, a dropped incarnation grants no call begun after its
// drop and its holders stop, and after the operator's re-key no old
// incarnation's fence is admitted once a new holder wrote.
//
// Every crash, the full restart's and the misconfigured replica's included,
// is a hard stop (Cluster.Crash, testhook.Crash), not Node.Close: the
// replica dies when its log store defers a commit index, cut off from its
// peers from that instant, and the commit index is dropped instead of
// flushed, so the restart replays its log only up to the older one on disk.
// TestScenarios logs what each scenario's crashes lost and fails if the
// schedule's lost none.
//
// # Checks (check.go, checkelect.go)
//
// Elections are checked as locks whose holder has a value, in their own
// namespace (history key "election:<name>"), so checks 1-5 cover them too.
//
// Histories are per group: a lock's history is its own (names carry their
// group), and a token is compared only with tokens of its own group's
// log, so checks 2, 3 and 5 key grants by (group, token). A read of a
// lock in a named group shows its holder's part there, whose ID is not the
// Session.ID clients record: it names its grant by token alone (unique in
// the group). A session's part in one group can end while the session
// lives on; a grant whose Done closed counts as lost (check 5, Lose).
//
//  1. Linearizability of each lock's and election's history with porcupine
//     (LockModel): one holder (leader) at a time, tokens (epochs) rising,
//     Release and Resign only by the current grant, TryAcquire and
//     TryCampaign refused only when held, a Revoke frees exactly the grant
//     it names (or the current one) and is refused only when there is
//     none, a resumed session keeps exactly the grants it held, Proclaim refused only when the term is over, and every
//     Leader read shows the leader, epoch and value of the moment. A call
//     that failed or timed out is resolved from the group's applied log
//     (applied.go, resolve): its request's part and number name it there,
//     so it is recorded as done (granted with its token, released or not,
//     returning when its entry was first applied) or left out (it never
//     took effect). Only an operator's revocation of unknown outcome stays
//     Unknown: it returns "never" and may or may not have happened, as
//     porcupine handles indeterminate operations. The group's frees that no
//     call made (session expiry, an operator's end, a withdrawn grant or
//     candidate) are Lose operations from the grant's call (a lagging
//     replica may tell its caller of a grant already over) to the next
//     grant (term), and the final linearizable read of every lock and
//     election closes the history. A check that runs out of time is
//     reported as timed out, apart from the violations.
//  2. Fencing: per lock and election, the tokens the Fencer admitted never
//     go down, so no two critical sections (terms) interleave, and every
//     admitted token was granted to its writer. And the holder stops first:
//     when a lock is granted or a leader elected, every earlier holder
//     (leader: a lower token) that did not release (resign) finds Done
//     closed (checked when the grant's call returns, on the earlier
//     holder's Lock or Leadership; a call that returns a grant the group
//     has already passed on checks nothing, its own Done closes instead).
//  3. Tokens are unique and rise with real time over the whole run, per
//     group, restarts included; per election, an epoch granted after another was
//     returned (by a Campaign or a Leader read) is larger, and no Leader
//     read returns an epoch older than one returned before it began.
//  4. No client on the cut-off side of a partition is granted a lock or
//     elected during the partition, unless that side holds a quorum of the
//     lock's own group (group a's voters 1,2,3 are a quorum on the side
//     {1,2} of five); after healing, every replica of that side grants
//     again in every group within 20s.
//  5. Nothing is lost: after healing, every lock (election) is held (led)
//     only by a live client that believes it holds it, with its token (dead
//     sessions' locks and terms were freed by expiry within 30s), and none
//     with a token older than its latest acknowledged grant.
//  6. Observers, each over all its deliveries, re-subscriptions included:
//     epochs never go back, a term never returns after a delivery without a
//     leader followed it, a term's values arrive in the order they were
//     proclaimed, and every leader delivered is a term the group granted to
//     that session (or a campaign of unknown outcome) with a value it
//     campaigned or proclaimed. After the final reads, every observer's last
//     delivered value equals its election's final Leader read within 20s.
//
// The shared lock and the semaphore (checkrecipe.go, sharedmodel.go):
//
//  7. Linearizability of each one's history with porcupine (SharedModel):
//     any number of shared grants at once (at most the permits of a
//     semaphore) or one exclusive grant, every grant's token above every
//     earlier grant's, an exclusive grant only when nobody holds and a
//     shared one only when nobody holds exclusively; a Try refused only
//     when the lock is held (a queued writer, which also refuses a
//     reader's Try, queues only behind holders), a semaphore's Try only
//     when every permit is held (a request queues only while none is
//     free); Release only by a current grant; the final read shows exactly
//     the current holders. FIFO order is not modelled: which waiting call
//     took effect first is not pinned down by a history of concurrent
//     calls, and the fsm's tests prove the queue. Unknown outcomes are as
//     in check 1, but their phantom grants are counted, not named, and
//     withdrawn at any step (no Lose operations: named phantoms and their
//     Loses made porcupine time out after a full restart); a known grant's
//     Lose is bounded by the first later grant it excludes (none for a
//     semaphore's), and every client has stopped before the final read,
//     so Loses and calls of unknown outcome end at its call.
//  8. Sections, from the history alone. A section whose Release returned
//     OK is certain: its grant was current from its Acquire's return to
//     its Release's call. When a grant G took effect (before its Acquire
//     returned), every certain section granted before it (a lower token)
//     whose Release was called after G's Acquire returned was current too,
//     so: G or such a section exclusive is a violation (an exclusive
//     section interleaved), and G with such sections beyond the permits is
//     one. G need not be certain (it was current at its grant whatever
//     became of it), which covers grants lost before their release and
//     every real-time overlap of two certain sections. A section that may
//     have ended early (released NotHeld or Unknown, lost, held at the
//     end) is never the certain side.
//  9. Fenced reads: a reader whose section is certain never saw, before
//     its Release was called, a writer's token above its own admitted by
//     the Fencer (that writer was granted while the reader held); the
//     writers' own writes are in check 2.
//  10. The holder stops first (as in check 2): when a writer is granted,
//     every other holder, and when a reader is, every writer, finds Done
//     closed; when a permit is, fewer than the permits others have not.
//     And the final read (as in check 5) shows every holder of each, each
//     a live client that believes it holds that grant, and every such
//     client among them.
//
// From the group's applied log, and the keepers:
//
//  11. KeepAlive's contract (external.go): a call that returned nil renewed
//     every part that held something, so none of its grants ends by its
//     part's own deadline before TTL − margin after the call began, by the
//     holder's clock.
//  12. Lock-delays: after an expiry or an operator's end of a grant of a
//     session with a lock-delay, the lock is granted to nobody for that
//     delay (as first applied; by the fastest replica clock, less a tenth).
//  13. Operator commands apply once: a Revoke or EndSession whose operation
//     ID reaches the log again (a retry) ends nothing more.
//
// Each scenario prints one line:
//
//	scenario=<name> ops=<n> faults=<n> violations=0 timeouts=0 unknown=<n> open=<n> duration=<s>
//
// (unknown: calls that ended in an error; open: those the applied log
// could not resolve.) The scenario's test log adds grants, terms of
// leadership, late writes the Fencer refused and values observed. A
// violation or a timed-out check writes porcupine's HTML visualisation and
// the group's applied commands around the grants it names (dump.go); the
// log names the files.
//
// # The report
//
// go test ./checker/ -run TestScenarios -report DIR writes DIR/index.html
// (report.go, reportpage.go): one self-contained page with every run of
// the process, each with its faults and partitions on a timeline (from
// the nemesis starting a fault to its heal) over its operations' returns
// per sixtieth of the run, its operations' outcomes and latencies by kind,
// each check and its result, and links to the dumps of a failure, copied
// beside the page; and, with the fencelock_seeded tag and TestSeededBugs,
// the seeded bugs and the run that caught each. docs/proof.md has the
// last run's.
package checker
