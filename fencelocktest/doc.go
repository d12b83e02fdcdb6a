// Package fencelocktest starts fencelock replicas for tests: a user's, the
// examples', and fencelock's own. It is to fencelock what hashicorp/raft's
// MakeCluster over InmemTransport, or etcd's integration framework, is to
// those: nothing in it is needed in production, and nothing a test needs is
// left out of it, so a test written with it can be copied out of this
// module.
//
// Two kinds of replicas:
//
//   - NewCluster runs replicas in the test's process on a
//     transport.Network, without sockets: partition and heal the network,
//     Freeze a replica (its raft messages and its HTTP handlers held), Crash,
//     Stop and Restart it, find the Leader. Cheap; use it for Go tests of
//     the library and of code built on it.
//   - StartServe runs three `fencelock serve` processes on loopback ports,
//     built once per test binary (Binary): SIGSTOP and SIGCONT them (Freeze,
//     Thaw), SIGKILL them (Kill), Restart them on their data dirs. Use it
//     for tests over the HTTP API from another process or language.
//
// Around them: raw calls to the HTTP API, its answers read to the letter
// (Call, Secrets, Events), and a test's own processes, a program built on
// fencelock started as its users would (Peers, StartProc, StartCmd). What
// replicas log, a test waits for or reads with package logtap
// (fencelocktest/logtap), apart so that fencelock's own tests can use it.
//
// Every call takes the test's testing.TB, fails the test with a message
// that says what did not happen, and registers the cleanup that stops what
// it started (t.Cleanup): a test using it leaks no goroutine or process.
package fencelocktest
