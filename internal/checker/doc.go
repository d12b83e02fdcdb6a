// Package checker proves fencelock's guarantees under faults, the way
// Jepsen and etcd's robustness tests do: it runs real replicas (in this
// process, on real data dirs, over the fault-injecting transport.Network),
// drives clients that acquire a lock, write to a shared register through a
// Fencer and release it, lets a nemesis inject faults, records every
// operation with its call and return times, and checks the history.
//
// # Workload
//
// N clients (default 4), each one application process with its own session
// (TTL 1.5s) on its home replica (another one while its home is down),
// contend for two locks. Each loop: Acquire (or, one time in four,
// TryAcquire) with a 2s deadline, then three fenced writes to the lock's
// register, checking Lock.Done before each, then Release.
//
// # Faults (nemesis.go)
//
// leader crash and restart, follower crash and restart from disk, leader
// isolated, partitions with the leader in the minority or in the majority,
// lossy links (5% loss), slow links (20-40ms), a client frozen in its
// critical section for 2.5 TTLs (testhook.Pause: its whole process, timers
// and all; on waking it writes without looking at Done), full-cluster
// restart, a follower that catches up by snapshot, and wall-clock jumps of
// +1h and -2h on every replica and client.
//
// # Checks (check.go)
//
//  1. Linearizability of each lock's history with porcupine (LockModel):
//     one holder at a time, tokens rising, Release only by the current grant,
//     TryAcquire refused only when held. A call that failed or timed out is
//     Unknown: it returns "never" and may or may not have happened, as
//     porcupine handles indeterminate operations. The group's frees that no
//     call made (session expiry, a withdrawn grant) are Lose operations
//     bounded by the next grant of the lock, and the final linearizable read
//     of every lock closes the history.
//  2. Fencing: per lock, the tokens the Fencer admitted never go down, so no
//     two critical sections interleave, and every admitted token was granted
//     to its writer. And the holder stops first: when a lock is granted,
//     every earlier holder that did not release it finds Lock.Done closed
//     (checked at the moment of the grant, on the earlier holder's lock).
//  3. Tokens are unique and rise with real time over the whole run,
//     restarts included.
//  4. No client on the cut-off side of a partition is granted a lock it
//     asked for during the partition; after healing, every replica of that
//     side grants again within 20s.
//  5. Nothing is lost: after healing, every lock is held only by a live
//     client that believes it holds it, with its token (dead sessions'
//     locks were freed by expiry within 30s), and none is held with a token
//     older than its latest acknowledged grant.
//
// Each scenario prints one line:
//
//	scenario=<name> ops=<n> faults=<n> violations=0 duration=<s>
//
// # Adding election (Campaign/Resign)
//
// An election is a lock whose holder also has a value, so the same model
// serves: add OpCampaign (recorded and stepped like OpAcquire with wait:
// Granted with the epoch token, Unknown on failure), OpResign (like
// OpRelease), OpProclaim (changes the value, same token: add Value to
// lockState and Op) and OpLeader (like OpRead, returning session, token and
// value, or no leader). Give elections their own names (they are a separate
// namespace), let clients campaign on them in client.run, record the
// leader's "writes" through the same Fencer with the epoch token, and add
// the Leadership to the beliefs so the holder-stops-first check covers
// leaders too. Lose (expiry) and the final read apply unchanged.
package checker
