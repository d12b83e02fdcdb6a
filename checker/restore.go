package checker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// The restore scenario (RunRestore) attacks disaster recovery: a backup
// taken under load, more grants after it, every replica stopped, a new
// deployment restored from the file, and the old deployment's holders
// writing late. It is not a Fault of Run: a restore rolls every group back
// to the backup by design (what was granted after it is forgotten, its
// holders' sessions gone), so the history of locks does not linearize
// across it, and what the restore promises is about fences alone
// (fencelock.Restore): every fence the restored deployment grants is above
// every fence the old one granted, before or after the backup. So it runs
// its own workload and checks.
//
// # Workload
//
// On 3 replicas, restoreClients clients (each a process with a session on
// its home replica) loop over Acquire of one of restoreLocks (one in each
// group), three fenced writes (Fencer.DoFence, checking Lock.Done before
// each) to the lock's resource, and Release. One Fencer stands for the
// resources, which outlive both deployments.
//
//  1. Once a lock was granted in every group, a replica takes a backup
//     (Node.Snapshot) while the clients go on. From the Snapshot call on,
//     the old clients' link to the resources is cut: each write they make
//     is held in flight, as a partition between the application and its
//     resource would hold it, and reaches the resource only after the
//     restore (below). The resources' marks are therefore of grants made
//     before the Snapshot call, all of them in the backup.
//  2. The old deployment grants at least postBackupGrants more times in
//     each group (calls made after Snapshot returned).
//  3. The old clients freeze: one holding a lock stops where it is, keeping
//     the lock, as a paused process would (it writes late, below); then
//     every replica stops (Cluster.StopAll): the disaster.
//  4. Every replica of a new deployment is restored from the file into a
//     new Dir (fencelock.Restore, with the same Members and groups) and
//     started; new clients work on it as above, on the same resources.
//  5. Once a restored holder's write was admitted at a resource, the old
//     deployment's writes reach it late, one at a time and interleaved with
//     the restored clients' own: every write held in flight, and one from
//     each frozen holder, which wakes and writes without looking at Done.
//
// # Checks
//
// Every fence either deployment granted is read from the groups' applied
// logs (testhook.ObserveApplied: grants by queue promotion and grants whose
// caller never heard of them included) and from the clients' calls.
//
//   - late-write admitted: at a resource, no write with a fence of the old
//     deployment is admitted after a write of a restored holder was.
//   - restored holder refused: no restored holder's write is refused as
//     stale below a mark an old deployment's fence set.
//   - fence granted twice: no fence (group, token) is granted by both
//     deployments, nor by two entries of one.
//   - restored fence not above: in each group, every fence the restored
//     deployment grants is above every fence the old one granted.
//   - group ID changed: a restored group's fences carry its old group ID
//     (the resources are keyed to it).
//
// A run that did not do what it says (no grant after the backup in a group,
// no restored write admitted at a resource, a late write not delivered) is
// an error, not a pass.
//
// Without the restore epoch (internal/replica Import importing the backup's
// state as it is), the restored groups count their tokens on from the
// backup's, and grant again the fences the old deployment granted after the
// backup: every check but the last fails.

// restoreLocks are the scenario's locks, one in each group (groupsFor(3)):
// each guards a resource of its name.
var restoreLocks = []string{"restore/r", "restore/r@a", "restore/r@b"}

const (
	restoreReplicas = 3
	restoreClients  = 6
	// postBackupGrants is how many grants each group makes, to calls made
	// after the backup returned, before the disaster; restoredGrants how
	// many the restored deployment makes in each group before the run ends.
	postBackupGrants, restoredGrants = 8, 4
	// restorePhaseBound bounds each wait of the scenario for its workload.
	restorePhaseBound = 30 * time.Second
)

// deployment tells the old deployment from the one restored from its
// backup.
type deployment int

const (
	oldDeployment deployment = iota
	restoredDeployment
)

func (d deployment) String() string {
	if d == oldDeployment {
		return "old"
	}
	return "restored"
}

// restoreGrant is a grant a client's call returned.
type restoreGrant struct {
	dep         deployment
	client      int
	name        string
	fence       fencelock.Fence
	afterBackup bool // called after the backup returned
}

// restoreWrite is a write that reached a resource.
type restoreWrite struct {
	dep    deployment
	client int
	fence  fencelock.Fence
	late   bool   // an old write delivered after the restore
	frozen bool   // of a holder frozen at the disaster
	mark   uint64 // refused as stale: the resource's mark then
}

// grantLog is every fence one deployment's groups granted, from their
// applied logs: (group name, token) -> the index of the entry that granted
// it. Each replica applies each entry, so one fence comes once per replica,
// always from the same entry; two entries granting one fence are recorded
// in twice.
type grantLog struct {
	mu    sync.Mutex
	first map[grantKey]uint64
	twice []string
}

func newGrantLog() *grantLog { return &grantLog{first: map[grantKey]uint64{}} }

// record is the replicas' hook (testhook.ObserveApplied).
func (g *grantLog) record(a testhook.Applied) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range a.Events {
		if e.Kind != fsm.EventGranted && e.Kind != fsm.EventElected {
			continue
		}
		k := grantKey{a.Group, e.Token}
		if i, ok := g.first[k]; ok && i != a.Index {
			g.twice = append(g.twice, fmt.Sprintf("group %q: token %d granted at index %d and again at %d", a.Group, e.Token, i, a.Index))
			continue
		}
		g.first[k] = a.Index
	}
}

func (g *grantLog) tokens() map[grantKey]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.first)
}

// restoreRun is what the scenario's clients and its driver share.
type restoreRun struct {
	c       *Cluster
	fencer  *fencelock.Fencer
	applied [2]*grantLog // by deployment
	began   time.Time

	mu          sync.Mutex
	cut         bool      // the old clients' writes are held in flight
	backupDone  time.Time // when Snapshot returned (zero: not yet)
	frozen      bool      // the old clients stop (the disaster comes)
	grants      []restoreGrant
	admitted    map[string][]restoreWrite // per resource, in the order admitted
	refused     map[string][]restoreWrite
	inFlight    []restoreLate // old writes not delivered yet
	delivered   int
	lateRefused int
	notes       []string
}

// restoreLate is an old deployment's write that reaches its resource late.
type restoreLate struct {
	client int
	name   string
	fence  fencelock.Fence
	frozen bool // the frozen holder's own write on waking
}

func (r *restoreRun) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// RunRestore runs the restore scenario with its replicas' data under dir
// (the old deployment's in dir/old, the restored one's in dir/restored).
// Violations of its checks are in the Report; an error says the scenario
// could not run, or did not do what it is for.
func RunRestore(ctx context.Context, seed uint64, dir string) (Report, error) {
	r := &restoreRun{fencer: fencelock.NewFencer(), began: time.Now(),
		applied:  [2]*grantLog{newGrantLog(), newGrantLog()},
		admitted: map[string][]restoreWrite{}, refused: map[string][]restoreWrite{}}
	tune := func(dep deployment) func(*fencelock.Config) {
		return func(cfg *fencelock.Config) {
			cfg.SessionTTL = ttl
			cfg.ProposalTimeout = 500 * time.Millisecond
			testhook.ObserveApplied(cfg, r.applied[dep].record)
		}
	}
	c, err := newCluster(restoreReplicas, filepath.Join(dir, "old"), seed, nil, tune(oldDeployment))
	if c != nil {
		defer c.StopAll()
	}
	if err != nil {
		return Report{}, err
	}
	r.c = c
	rng := rand.New(rand.NewPCG(seed, 1))

	// The old deployment, under load.
	cctx, stopOld := context.WithCancel(ctx)
	defer stopOld()
	var wg sync.WaitGroup
	for i := range restoreClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.client(cctx, i, oldDeployment, c.IDs()[i%restoreReplicas], rand.New(rand.NewPCG(seed, uint64(i)+2)))
		}()
	}
	if err := r.await(ctx, "a grant in every group", func() bool { return r.everyGroup(oldDeployment, false, 1) }); err != nil {
		stopOld()
		wg.Wait()
		return Report{}, err
	}

	// The backup, while the clients go on.
	var file bytes.Buffer
	by := c.IDs()[rng.IntN(restoreReplicas)]
	r.mu.Lock()
	r.cut = true
	r.mu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, restorePhaseBound)
	spans := []Span{{Name: "backup under load", Start: time.Since(r.began)}}
	err = c.Node(by).Snapshot(bctx, &file)
	spans[0].End = time.Since(r.began)
	cancel()
	if err != nil {
		stopOld()
		wg.Wait()
		return Report{}, fmt.Errorf("restore: backup on replica %d: %w", by, err)
	}
	r.mu.Lock()
	r.backupDone = time.Now()
	during := len(r.grants)
	r.mu.Unlock()
	info, err := fencelock.ReadBackup(bytes.NewReader(file.Bytes()))
	if err != nil {
		stopOld()
		wg.Wait()
		return Report{}, fmt.Errorf("restore: the backup: %w", err)
	}
	for _, g := range info.Groups {
		r.logf("backup on replica %d: group %q at index %d, last token %d, restore epoch %d, %d locks held",
			by, g.Name, g.Index, g.LastToken, g.RestoreEpoch, g.Locks)
	}

	// More grants after it; then the clients freeze and every replica
	// stops.
	err = r.await(ctx, fmt.Sprintf("%d grants in every group after the backup", postBackupGrants),
		func() bool { return r.everyGroup(oldDeployment, true, postBackupGrants) })
	r.mu.Lock()
	r.frozen = true
	r.mu.Unlock()
	wg.Wait()
	stopOld()
	if err != nil {
		return Report{}, err
	}
	spans = append(spans, Span{Name: "every replica stopped, restored", Start: time.Since(r.began)})
	c.StopAll()
	r.mu.Lock()
	grants, held, frozen := len(r.grants), len(r.inFlight), countFrozen(r.inFlight)
	r.mu.Unlock()
	r.logf("old deployment: %d grants (%d before the backup returned), %d writes held in flight, %d of them by holders frozen at the disaster",
		grants, during, held, frozen)

	// The restored deployment: new Dirs, the same Members and groups.
	c.dir, c.tune = filepath.Join(dir, "restored"), tune(restoredDeployment)
	for _, id := range c.IDs() {
		if _, err := fencelock.Restore(bytes.NewReader(file.Bytes()), c.config(id)); err != nil {
			return Report{}, fmt.Errorf("restore: replica %d: %w", id, err)
		}
	}
	if err := c.StartAll(); err != nil {
		return Report{}, fmt.Errorf("restore: start the restored deployment: %w", err)
	}
	spans[1].End = time.Since(r.began)
	spans = append(spans, Span{Name: "old holders' writes delivered late", Start: spans[1].End})
	nctx, stopNew := context.WithCancel(ctx)
	defer stopNew()
	for i := range restoreClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := restoreClients + i // a new process
			r.client(nctx, id, restoredDeployment, c.IDs()[i%restoreReplicas], rand.New(rand.NewPCG(seed, uint64(id)+2)))
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.deliverLate(nctx, rand.New(rand.NewPCG(seed, 0)))
	}()
	err = r.await(ctx, fmt.Sprintf("%d restored grants in every group, a restored write admitted at every resource and every late write delivered", restoredGrants),
		func() bool {
			r.mu.Lock()
			pending := len(r.inFlight)
			r.mu.Unlock()
			return pending == 0 && r.everyGroup(restoredDeployment, false, restoredGrants) && r.restoredWroteEverywhere()
		})
	stopNew()
	wg.Wait()
	if err != nil {
		return Report{}, err
	}

	rep := r.check()
	rep.Name, rep.Faults, rep.Duration = "restore", 1, time.Since(r.began)
	spans[2].End = rep.Duration
	rep.Seed, rep.Started, rep.Timeline, rep.Checks = seed, r.began, spans, restoreChecks(rep.Violations)
	return rep, nil
}

// await waits until done, at most restorePhaseBound.
func (r *restoreRun) await(ctx context.Context, what string, done func() bool) error {
	deadline := time.Now().Add(restorePhaseBound)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("restore: no %s within %v: the scenario did not run", what, restorePhaseBound)
		}
		if err := wait(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// everyGroup reports whether dep's clients were granted at least n locks
// in every group (only grants called after the backup returned, if
// afterBackup).
func (r *restoreRun) everyGroup(dep deployment, afterBackup bool, n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	by := map[string]int{}
	for _, g := range r.grants {
		if g.dep == dep && (g.afterBackup || !afterBackup) {
			by[groupOf(g.name)]++
		}
	}
	for _, name := range restoreLocks {
		if by[groupOf(name)] < n {
			return false
		}
	}
	return true
}

// restoredWroteEverywhere reports whether every resource admitted a write
// of a restored holder.
func (r *restoreRun) restoredWroteEverywhere() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range restoreLocks {
		if !r.restoredWrote(name) {
			return false
		}
	}
	return true
}

// restoredWrote reports whether resource name admitted a restored
// holder's write; r.mu is held.
func (r *restoreRun) restoredWrote(name string) bool {
	return slices.ContainsFunc(r.admitted[name], func(w restoreWrite) bool { return w.dep == restoredDeployment })
}

// client is one application process of deployment dep: a session on its
// home replica (another one's while it is down), and a loop over Acquire,
// three fenced writes, Release. An old client stops once the disaster
// comes; if it holds a lock then, it stops holding it, its process paused,
// and its write reaches the resource late (deliverLate).
func (r *restoreRun) client(ctx context.Context, id int, dep deployment, home uint64, rng *rand.Rand) {
	var s *fencelock.Session
	defer func() {
		if s != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			_ = s.Close(cctx)
			cancel()
		}
	}()
	for ctx.Err() == nil && !r.freezes(dep) {
		if s == nil || s.Err() != nil {
			node := r.c.Node(home)
			if node == nil {
				node = r.c.Node(r.c.IDs()[rng.IntN(restoreReplicas)])
			}
			if node == nil {
				_ = wait(ctx, 20*time.Millisecond)
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, opTimeout)
			var err error
			s, err = node.NewSession(sctx, fencelock.WithTTL(ttl))
			cancel()
			if err != nil {
				s = nil
				_ = wait(ctx, 20*time.Millisecond)
				continue
			}
		}
		name := restoreLocks[rng.IntN(len(restoreLocks))]
		after := r.afterBackup()
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		l, err := s.Acquire(actx, name)
		cancel()
		if err != nil {
			_ = wait(ctx, 20*time.Millisecond)
			continue
		}
		r.granted(restoreGrant{dep: dep, client: id, name: name, fence: l.Fence(), afterBackup: after})
		for range 3 {
			if r.freezes(dep) {
				// Paused in its critical section, holding the lock: its
				// session is dropped unclosed, and it writes on waking.
				r.hold(restoreLate{client: id, name: name, fence: l.Fence(), frozen: true})
				s = nil
				return
			}
			if closed(l.Done()) {
				break
			}
			r.write(dep, id, name, l.Fence())
			_ = wait(ctx, 2*time.Millisecond) // the work between writes
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		_ = l.Release(rctx)
		cancel()
	}
}

// freezes reports whether dep's clients must stop: the old ones once the
// disaster comes.
func (r *restoreRun) freezes(dep deployment) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return dep == oldDeployment && r.frozen
}

func (r *restoreRun) granted(g restoreGrant) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants = append(r.grants, g)
}

// afterBackup reports whether the backup has returned: a call made from
// now on is not in it.
func (r *restoreRun) afterBackup() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.backupDone.IsZero()
}

// hold keeps an old write in flight until deliverLate delivers it.
func (r *restoreRun) hold(w restoreLate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight = append(r.inFlight, w)
}

// write is a holder's write to the resource name: at once, or, for an old
// client once its link to the resources is cut, held in flight.
func (r *restoreRun) write(dep deployment, client int, name string, f fencelock.Fence) {
	r.mu.Lock()
	cut := dep == oldDeployment && r.cut
	r.mu.Unlock()
	if cut {
		r.hold(restoreLate{client: client, name: name, fence: f})
		return
	}
	r.reach(restoreWrite{dep: dep, client: client, fence: f}, name)
}

// reach delivers w to resource name through the Fencer and records what
// the resource did with it.
func (r *restoreRun) reach(w restoreWrite, name string) bool {
	err := r.fencer.DoFence(name, w.fence, func() error {
		// Under the resource's check: the order of admission.
		r.mu.Lock()
		r.admitted[name] = append(r.admitted[name], w)
		r.mu.Unlock()
		return nil
	})
	if err == nil {
		return true
	}
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		w.mark = stale.Highest
	}
	r.mu.Lock()
	r.refused[name] = append(r.refused[name], w)
	r.mu.Unlock()
	return false
}

// deliverLate delivers the old deployment's writes held in flight, each
// once a restored holder's write was admitted at its resource, one at a
// time in random order, a few milliseconds apart so that they interleave
// with the restored holders' writes.
func (r *restoreRun) deliverLate(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		r.mu.Lock()
		var ready []int
		for i, w := range r.inFlight {
			if r.restoredWrote(w.name) {
				ready = append(ready, i)
			}
		}
		if len(r.inFlight) == 0 {
			r.mu.Unlock()
			return
		}
		var w restoreLate
		if len(ready) > 0 {
			i := ready[rng.IntN(len(ready))]
			w = r.inFlight[i]
			r.inFlight = slices.Delete(r.inFlight, i, i+1)
		}
		r.mu.Unlock()
		if len(ready) > 0 {
			ok := r.reach(restoreWrite{dep: oldDeployment, client: w.client, fence: w.fence, late: true, frozen: w.frozen}, w.name)
			r.mu.Lock()
			r.delivered++
			if !ok {
				r.lateRefused++
			}
			r.mu.Unlock()
		}
		_ = wait(ctx, 3*time.Millisecond)
	}
}

func countFrozen(ws []restoreLate) int {
	n := 0
	for _, w := range ws {
		if w.frozen {
			n++
		}
	}
	return n
}

// check runs the scenario's checks on what the run recorded.
func (r *restoreRun) check() Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{ByGroup: map[string]int{}}
	for _, ws := range r.admitted {
		rep.Ops += len(ws)
	}
	for _, ws := range r.refused {
		rep.Ops += len(ws)
	}
	rep.Ops += len(r.grants)
	rep.Grants = len(r.grants)
	rep.Refused = r.lateRefused
	old, restored := r.applied[oldDeployment].tokens(), r.applied[restoredDeployment].tokens()
	groupIDs := map[string]uint64{}
	for _, g := range r.grants {
		k := grantKey{groupOf(g.name), g.fence.Token}
		// A grant the applied logs missed (none should) counts too, at an
		// unknown index.
		if g.dep == oldDeployment {
			if _, ok := old[k]; !ok {
				old[k] = 0
			}
			groupIDs[k.group] = g.fence.Group
		} else {
			if _, ok := restored[k]; !ok {
				restored[k] = 0
			}
			rep.ByGroup[k.group]++
		}
	}
	rep.Violations = restoreViolations(r.admitted, r.refused, old, restored, r.grants, groupIDs)
	for d, g := range r.applied {
		g.mu.Lock()
		for _, t := range g.twice {
			rep.Violations = append(rep.Violations, fmt.Sprintf("fence granted twice by the %v deployment: %s", deployment(d), t))
		}
		g.mu.Unlock()
	}
	rep.Notes = append(slices.Clone(r.notes),
		fmt.Sprintf("fences granted: %d by the old deployment, %d by the restored one (applied logs); %d late writes delivered, %d of them refused",
			len(old), len(restored), r.delivered, r.lateRefused))
	return rep
}

// restoreViolations runs the scenario's checks: admitted and refused are
// the writes each resource admitted (in that order) and refused; old and
// restored every fence each deployment granted; grants the clients'
// grants; groupIDs the old deployment's group IDs by group name.
func restoreViolations(admitted, refused map[string][]restoreWrite, old, restored map[grantKey]uint64,
	grants []restoreGrant, groupIDs map[string]uint64) []string {
	var v []string
	// One violation per check, resource and fence, however often its
	// holder wrote (a fence may be in two checks: granted by both).
	type named struct {
		restored bool
		name     string
		fence    fencelock.Fence
	}
	seen := map[named]bool{}
	once := func(dep deployment, name string, f fencelock.Fence) bool {
		k := named{dep == restoredDeployment, name, f}
		first := !seen[k]
		seen[k] = true
		return first
	}
	for _, name := range slices.Sorted(maps.Keys(admitted)) {
		var first *restoreWrite
		for i, w := range admitted[name] {
			switch {
			case w.dep == restoredDeployment && first == nil:
				first = &admitted[name][i]
			case w.dep == oldDeployment && first != nil && once(w.dep, name, w.fence):
				v = append(v, fmt.Sprintf("late-write admitted: %q admitted the old deployment's fence %v (client %d, frozen holder %v) after the restored holder's %v (client %d) wrote",
					name, w.fence, w.client, w.frozen, first.fence, first.client))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(refused)) {
		for _, w := range refused[name] {
			if _, byOld := old[grantKey{groupOf(name), w.mark}]; w.dep == restoredDeployment && w.mark != 0 && byOld && once(w.dep, name, w.fence) {
				v = append(v, fmt.Sprintf("restored holder refused: %q refused the restored deployment's fence %v (client %d) as stale below %d, a token of the old deployment",
					name, w.fence, w.client, w.mark))
			}
		}
	}
	var twice []grantKey
	for k := range restored {
		if _, ok := old[k]; ok {
			twice = append(twice, k)
		}
	}
	sort.Slice(twice, func(i, j int) bool {
		return twice[i].group < twice[j].group || twice[i].group == twice[j].group && twice[i].token < twice[j].token
	})
	for _, k := range twice {
		v = append(v, fmt.Sprintf("fence granted twice: group %q token %d granted by the old deployment and again by the restored one", k.group, k.token))
	}
	highest, lowest := map[string]uint64{}, map[string]uint64{}
	for k := range old {
		highest[k.group] = max(highest[k.group], k.token)
	}
	for k := range restored {
		if l, ok := lowest[k.group]; !ok || k.token < l {
			lowest[k.group] = k.token
		}
	}
	for _, g := range slices.Sorted(maps.Keys(lowest)) {
		if h, ok := highest[g]; ok && lowest[g] <= h {
			v = append(v, fmt.Sprintf("restored fence not above: group %q: the restored deployment granted token %d (epoch %d), not above the old deployment's %d (epoch %d)",
				g, lowest[g], fsm.Epoch(lowest[g]), h, fsm.Epoch(h)))
		}
	}
	changed := map[string]bool{}
	for _, g := range grants {
		group := groupOf(g.name)
		if id, ok := groupIDs[group]; ok && g.dep == restoredDeployment && g.fence.Group != id && !changed[group] {
			changed[group] = true
			v = append(v, fmt.Sprintf("group ID changed: group %q's restored fence %v, its old fences' group %016x", group, g.fence, id))
		}
	}
	return v
}
