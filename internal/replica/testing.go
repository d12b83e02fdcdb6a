package replica

// TestingCrashOnClose is for tests: it makes the next Close end the replica
// as the death of its process would (SIGKILL, power loss) rather than as a
// clean shutdown. The log store then drops the commit-only saves it still
// defers instead of writing them (see internal/logstore), so a restart on
// the same Dir finds the last commit index a sync wrote, replays the log up
// to it and learns the rest from the group, as it would after a real
// crash. Nothing else differs: a clean Close writes nothing else that a
// crash would lose (entries, terms and votes are synced as they are saved,
// and the state machine lives in memory). Until Close the replica runs on,
// as a process does until it is killed. Production code never calls it.
func (r *Replica) TestingCrashOnClose() {
	if s := r.store.Load(); s != nil {
		s.Crash()
	}
}
