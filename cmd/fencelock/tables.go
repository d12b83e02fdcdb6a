package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock"
	apiclient "github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/httpapi"
)

// listFlags are the flags of status, locks and sessions.
type listFlags struct {
	clientFlags
	output string
	group  string // locks and sessions: the group listed
	parts  bool   // locks and sessions: a PART column, the part IDs in named groups
}

func (f *listFlags) parse(name, argsUsage string, args []string) ([]string, error) {
	return f.parseWith(name, argsUsage, args, func(fs *flag.FlagSet) {
		if name != "status" {
			fs.StringVar(&f.group, "group", "", "the group to list (default: the default group; a PREFIX may also end in @group)")
			fs.BoolVar(&f.parts, "parts", false, partsUsage)
		}
	})
}

// parseFlagsOnly is parse for a command that takes flags and no operand.
func (f *listFlags) parseFlagsOnly(name string, args []string) error {
	rest, err := f.parse(name, "[flags]", args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%s: unexpected argument %q", name, rest[0])
	}
	return nil
}

// parseWith is parse with the flags more registers in place of --group and
// --parts (locks has its own; groups, none: more is nil).
func (f *listFlags) parseWith(name, argsUsage string, args []string, more func(*flag.FlagSet)) ([]string, error) {
	fs := newFlags(name, argsUsage)
	f.register(fs)
	fs.StringVar(&f.output, "o", "text", "output: text (or table, the same) or json")
	if more != nil {
		more(fs)
	}
	rest, err := parseAll(fs, args)
	if err != nil {
		return nil, err
	}
	if f.output, err = checkOutput(name, f.output); err != nil {
		return nil, err
	}
	return rest, nil
}

// checkOutput checks an -o value: every command takes text (or table, the
// same) and json. It returns the value with table read as text.
func checkOutput(cmd, o string) (string, error) {
	switch o {
	case "text", "table":
		return "text", nil
	case "json":
		return o, nil
	}
	return "", fmt.Errorf("%s: -o %s: want text (or table, the same) or json", cmd, o)
}

const partsUsage = "a PART column: each session's part ID in its named group (what EndSessionIn and DELETE /v1/sessions/ID?group= take)"

// sessionShown is how a table shows a session: its session ID, or "?" for
// a part of a named group opened before the group wrote log version 10,
// which only its part ID (--parts) names.
func sessionShown(id apiclient.ID) string {
	if id == 0 {
		return "?"
	}
	return id.String()
}

// partShown is the PART column's value: the part ID in a named group, the
// session ID in the default group (the part is the session).
func partShown(session, part apiclient.ID) string {
	if part == 0 {
		return session.String()
	}
	return part.String()
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 15*time.Second)
}

// printJSON writes raw, indented, for scripts.
func printJSON(raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// printValue writes v as printJSON does.
func printValue(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printJSON(b)
}

// get reads path with a read's bound (read) and prints it: as the replica
// wrote it with -o json, else decoded into v and shown by show.
func (f *listFlags) get(path string, v any, show func() error) error {
	return f.read(func(ctx context.Context, c *apiclient.Client) error {
		var raw json.RawMessage
		if err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
			return err
		}
		if f.output == "json" {
			return printJSON(raw)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return err
		}
		return show()
	})
}

// statusCmd prints one replica's view of the groups (the first of --http
// that answers), whether each replica answers, and each group's leader.
//
// It never shows a voter it cannot reach as leader or follower: one that
// answers no --http URL while some --http URL does not answer may be the
// one that does not, so it is shown as a leader or follower only if its
// raft port accepts a connection; one whose raft port refuses is NOT
// RUNNING, one that cannot be told UNCONFIRMED. It exits non-zero when a
// group has no leader or a voter is unreachable, not running or
// unconfirmed: a script or a probe sees it (with -o json too).
func statusCmd(args []string) error {
	var f listFlags
	if err := f.parseFlagsOnly("status", args); err != nil {
		return err
	}
	return f.read(func(ctx context.Context, c *apiclient.Client) error { return printStatus(ctx, c, f.output) })
}

// printStatus is status's output, from c's replica.
func printStatus(ctx context.Context, c *apiclient.Client, output string) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	answers := probe(ctx, c)
	rows, notReached, missing := voterRoles(st, answers, dialRaft)
	if output == "json" {
		if err := printJSON(st.Raw); err != nil {
			return err
		}
		return errors.Join(noLeader(st), missing)
	}
	fmt.Printf("replica %d, group %s, term %d, applied index %d\n", st.ReplicaID, st.GroupID, st.Term, st.AppliedIndex)
	fmt.Printf("runs %s, reads log formats up to %d and snapshots up to %d; the default group writes %s\n",
		st.Version.Version, st.Version.Codec, st.Version.Snapshot, writes(st.Writes))
	fmt.Printf("%s, %s held, %d waiting\n\n", plural(st.Sessions, "session"), plural(st.LocksHeld, "lock"), st.Waiters)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tRAFT ADDRESS\tROLE\tHTTP")
	for _, x := range rows {
		this := ""
		if x.id == fmt.Sprint(st.ReplicaID) {
			this = " (this)"
		}
		web := answers.byID[x.id]
		if web == "" {
			web = "-"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\n", x.id, this, x.addr, x.role, web)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range answers.dead {
		fmt.Printf("NOT ANSWERING: %s\n", d)
	}
	if err := printGroups(st.Groups, notReached); err != nil {
		return err
	}
	if err := printMirrors(st.Mirrors); err != nil {
		return err
	}
	return errors.Join(noLeader(st), missing)
}

// printMirrors lists the groups the replica reaches through a mirror
// (placement "own"), with the voter feeding each.
func printMirrors(mirrors []apiclient.GroupStatus) error {
	if len(mirrors) == 0 {
		return nil
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MIRRORED GROUP\tGROUP ID\tLEADER\tVOTERS\tFED BY")
	for _, g := range mirrors {
		leader, from := "NO LEADER", "NONE (between voters)"
		if g.LeaderID != 0 {
			leader = fmt.Sprint(g.LeaderID)
		}
		if g.Mirror != 0 {
			from = fmt.Sprint(g.Mirror)
		}
		voters := make([]string, len(g.Voters))
		for i, v := range g.Voters {
			voters[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", groupName(g.Name), g.GroupID, leader, strings.Join(voters, ","), from)
	}
	return tw.Flush()
}

// roleRow is one member in status's table.
type roleRow struct{ id, addr, role string }

// reach is how a voter's raft port answered a connection.
type reach int

const (
	reachOK      reach = iota // accepted: a process listens there
	reachRefused              // refused: its host runs nothing there
	reachUnknown              // timed out, no route, a bad address: cannot tell
)

// ErrVoterNotReached: status shows a voter that is unreachable, not
// running, or that it cannot confirm.
var ErrVoterNotReached = errors.New("voters not reached")

// voterRoles returns the members' rows, in ID order, the voters shown as
// not reached (by ID: "UNREACHABLE", "NOT RUNNING" or "UNCONFIRMED"), and
// an error wrapping ErrVoterNotReached naming them (nil if none).
//
// A voter's role is the view of st's replica (or, if st's is a follower's,
// of the leader when it answered: only a leader, or any replica while there
// is none, knows which voters it does not hear from). That view lags a
// voter's death by a few election timeouts, so a voter that answered no
// --http URL, while some --http URL did not answer, is shown as a leader or
// follower only if dial finds its raft port open.
func voterRoles(st apiclient.ReplicaStatus, ans answers, dial func(addr string) reach) ([]roleRow, map[string]string, error) {
	seen := st
	if ld, ok := ans.status[st.LeaderID]; ok && st.LeaderID != st.ReplicaID {
		seen = ld
	}
	unreached := map[string]bool{}
	for _, id := range seen.Unreachable {
		unreached[fmt.Sprint(id)] = true
	}
	var rows []roleRow
	var bad []string
	notReached := map[string]string{}
	for id, a := range st.Voters {
		role := "follower"
		if id == fmt.Sprint(st.LeaderID) {
			role = "leader"
		}
		_, answered := ans.byID[id]
		switch {
		case unreached[id]:
			// This replica has not heard from it: whatever it was, it is
			// not following this group now.
			role = fmt.Sprintf("UNREACHABLE from %d", seen.ReplicaID)
			bad = append(bad, id+" (unreachable)")
			notReached[id] = "UNREACHABLE"
		case answered || len(ans.dead) == 0:
			// It answered; or every --http URL answered, so it is one
			// outside --http and the view above is all there is.
		default:
			switch dial(a) {
			case reachOK:
			case reachRefused:
				role = "NOT RUNNING (its raft port refuses)"
				bad = append(bad, id+" (not running)")
				notReached[id] = "NOT RUNNING"
			default:
				role = "UNCONFIRMED (" + role + " as " + fmt.Sprint(st.ReplicaID) + " sees it)"
				bad = append(bad, id+" (unconfirmed: no answer on --http, raft port not reached)")
				notReached[id] = "UNCONFIRMED"
			}
		}
		rows = append(rows, roleRow{id, a, role})
	}
	for id, a := range st.NonVoting {
		rows = append(rows, roleRow{id, a, "non-voting"})
	}
	sort.Slice(rows, func(i, j int) bool {
		return len(rows[i].id) < len(rows[j].id) || len(rows[i].id) == len(rows[j].id) && rows[i].id < rows[j].id
	})
	if len(bad) == 0 {
		return rows, nil, nil
	}
	sort.Strings(bad)
	return rows, notReached, fmt.Errorf("%w: replica %s", ErrVoterNotReached, strings.Join(bad, ", replica "))
}

// dialRaft tries addr's TCP port for a second: a connection refused means
// its host is up and runs no replica there; no answer cannot tell (a
// firewall may keep this host off the raft port).
func dialRaft(addr string) reach {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
		return reachOK
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return reachRefused
	}
	return reachUnknown
}

// noLeader is the error of a status that shows a group without a leader.
func noLeader(st apiclient.ReplicaStatus) error {
	var none []string
	for _, g := range st.Groups {
		if g.LeaderID == 0 {
			none = append(none, groupName(g.Name))
		}
	}
	if len(st.Groups) == 0 && st.LeaderID == 0 { // a server from before groups
		none = append(none, groupName(""))
	}
	if len(none) == 0 {
		return nil
	}
	return fmt.Errorf("NO LEADER in %s (as replica %d sees it): calls to it fail until a quorum of its voters runs and reaches each other",
		strings.Join(none, ", "), st.ReplicaID)
}

func groupName(name string) string {
	if name == "" {
		return "(default)"
	}
	return name
}

// answers are which of --http answer GET /v1/status: by replica ID, and
// the bases that do not, with why.
type answers struct {
	byID   map[string]string
	status map[uint64]apiclient.ReplicaStatus
	dead   []string
}

// probe asks every --http base for its status, at once, each within a few
// seconds: the point is to see which replicas answer, not to wait for them.
func probe(ctx context.Context, c *apiclient.Client) answers {
	out := answers{byID: map[string]string{}, status: map[uint64]apiclient.ReplicaStatus{}}
	for _, r := range c.Replicas(ctx, 3*time.Second) {
		if r.Err != nil {
			out.dead = append(out.dead, fmt.Sprintf("%s: %v", r.Endpoint, r.Err))
			continue
		}
		out.byID[fmt.Sprint(r.Status.ReplicaID)] = r.Endpoint
		out.status[r.Status.ReplicaID] = r.Status
	}
	sort.Strings(out.dead)
	return out
}

// plural is "1 lock", "2 locks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// printGroups lists every group and its leader; a group without one says
// NO LEADER, and a leader in notReached (by ID) says how it is not.
func printGroups(groups []apiclient.GroupStatus, notReached map[string]string) error {
	if len(groups) == 0 {
		return nil // a server from before groups
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tGROUP ID\tLEADER\tVOTERS\tTHIS REPLICA\tLOCKS\tWRITES")
	for _, g := range groups {
		leader := "NO LEADER"
		if g.LeaderID != 0 {
			leader = fmt.Sprint(g.LeaderID)
			if why, ok := notReached[leader]; ok {
				leader += " (" + why + ")"
			}
		}
		role := "follower"
		switch {
		case g.IsLeader:
			role = "leader"
		case g.NonVoting:
			role = "non-voting"
		}
		voters := make([]string, len(g.Voters))
		for i, v := range g.Voters {
			voters[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", groupName(g.Name), g.GroupID, leader, strings.Join(voters, ","), role, g.LocksHeld, writes(g.Writes))
	}
	return tw.Flush()
}

// writes renders the formats a group writes: "log 9, snapshot 7"; "?"
// from a server of a build before the version gate, which writes the
// newest it knows.
func writes(f apiclient.Formats) string {
	if f.Codec == 0 {
		return "?"
	}
	return fmt.Sprintf("log %d, snapshot %d", f.Codec, f.Snapshot)
}

// heldFor renders how long ago a grant was made, or "?" when unknown.
func heldFor(ms int64, at string) string {
	if at == "" {
		return "?"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// holderNames lists a lock's holders by session name (the ID for one
// without a name).
func holderNames(l apiclient.LockEntry) string {
	if len(l.Holders) == 0 {
		return "-"
	}
	names := make([]string, len(l.Holders))
	for i, h := range l.Holders {
		names[i] = h.Name
		if names[i] == "" {
			names[i] = sessionShown(h.Session)
		}
	}
	return strings.Join(names, ",")
}

// waiterNames lists a lock's listed waiters, head first, each by session
// name (the ID for one without a name).
func waiterNames(l apiclient.LockEntry) string {
	if len(l.Waiting) == 0 { // a server from before names: the IDs
		q := make([]string, len(l.Queue))
		for i, id := range l.Queue {
			q[i] = sessionShown(id)
		}
		return strings.Join(q, ",")
	}
	q := make([]string, len(l.Waiting))
	for i, w := range l.Waiting {
		q[i] = w.Name
		if q[i] == "" {
			q[i] = sessionShown(w.Session)
		}
	}
	if len(l.Waiting) < l.Waiters {
		q = append(q, fmt.Sprintf("…(+%d)", l.Waiters-len(l.Waiting)))
	}
	return strings.Join(q, ",")
}

func locksCmd(args []string) error {
	var f listFlags
	var sortBy, group string
	var top int
	rest, err := f.parseWith("locks", "[flags] [PREFIX]", args, func(fs *flag.FlagSet) {
		fs.StringVar(&sortBy, "sort", "name", `"name": every held lock in name order; "waiters": the locks with the longest queues, longest first`)
		fs.IntVar(&top, "n", 10, "with --sort waiters: how many locks (1 to 100)")
		fs.StringVar(&group, "group", "", "the group to list or rank (default: list every group, rank the default group's; a PREFIX may also end in @group)")
		fs.BoolVar(&f.parts, "parts", false, partsUsage)
	})
	if err != nil {
		return err
	}
	if sortBy != "name" && sortBy != "waiters" {
		return fmt.Errorf("locks: --sort %q: want name or waiters", sortBy)
	}
	if sortBy == "waiters" && len(rest) > 0 {
		return fmt.Errorf("locks: --sort waiters ranks every lock of a group: no PREFIX (got %q)", rest[0])
	}
	if sortBy == "waiters" && (top < 1 || top > fencelock.MaxContended) {
		return fmt.Errorf("locks: -n %d: want 1 to %d", top, fencelock.MaxContended)
	}
	if len(rest) > 1 {
		return fmt.Errorf("locks: want at most one PREFIX, got %d", len(rest))
	}
	prefix := ""
	if len(rest) == 1 {
		prefix = rest[0]
	}
	return f.read(func(ctx context.Context, c *apiclient.Client) error {
		var list apiclient.LockList
		var err error
		if sortBy == "waiters" {
			list, err = c.Contended(ctx, group, top)
		} else {
			list, err = c.Locks(ctx, prefix, group)
		}
		if err != nil {
			return err
		}
		if f.output == "json" {
			return printValue(lockListJSON{Group: list.Group, AllGroups: list.AllGroups, Locks: list.Locks})
		}
		return printLocks(list, f.parts)
	})
}

// lockListJSON and sessionListJSON are what -o json prints: the API's page,
// for every entry.
type lockListJSON struct {
	Group     string                `json:"group"`
	AllGroups bool                  `json:"all_groups,omitempty"`
	Locks     []apiclient.LockEntry `json:"locks"`
	More      bool                  `json:"more"`
}

type sessionListJSON struct {
	Group    string                   `json:"group"`
	Sessions []apiclient.SessionEntry `json:"sessions"`
	More     bool                     `json:"more"`
}

// printLocks is the table of locks and contended. A listing of every
// group that holds a named group's lock has a GROUP column first. HOLDER
// SESSION is the holder's session ID in every group ("?" if its group
// does not know it); with parts, HOLDER PART follows it: its part ID in
// the lock's group.
func printLocks(list apiclient.LockList, parts bool) error {
	named := false
	for _, l := range list.Locks {
		named = named || (list.AllGroups && l.Group != "")
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	head := "LOCK\tHOLDER\tHELD FOR\tHOLDER SESSION\t"
	if parts {
		head += "HOLDER PART\t"
	}
	head += "TOKEN\tOWNER\tWAITERS\tQUEUE (HEAD FIRST)"
	if named {
		head = "GROUP\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, l := range list.Locks {
		if named {
			fmt.Fprintf(tw, "%s\t", groupName(l.Group))
		}
		holder, part := "-", "-"
		if l.Held {
			holder, part = sessionShown(l.HolderSession), partShown(l.HolderSession, l.HolderPart)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", l.Name, holderNames(l), heldFor(l.HeldForMS, l.GrantedAt), holder)
		if parts {
			fmt.Fprintf(tw, "%s\t", part)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", l.FencingToken, l.Owner, l.Waiters, waiterNames(l))
	}
	return tw.Flush()
}

func sessionsCmd(args []string) error {
	var f listFlags
	if err := f.parseFlagsOnly("sessions", args); err != nil {
		return err
	}
	return f.read(func(ctx context.Context, c *apiclient.Client) error {
		list, err := c.Sessions(ctx, f.group)
		if err != nil {
			return err
		}
		if f.output == "json" {
			return printValue(sessionListJSON{Group: f.group, Sessions: list.Sessions})
		}
		return printSessions(list, f.parts)
	})
}

// printSessions is the table of sessions; with parts, a PART column
// follows SESSION: each one's part ID in the listed group.
func printSessions(list apiclient.SessionList, parts bool) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	head := "SESSION\t"
	if parts {
		head += "PART\t"
	}
	fmt.Fprintln(tw, head+"NAME\tOWNER\tTTL\tHELD\tWAITING")
	for _, s := range list.Sessions {
		fmt.Fprintf(tw, "%s\t", sessionShown(s.SessionID))
		if parts {
			fmt.Fprintf(tw, "%s\t", partShown(s.SessionID, s.PartID))
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%d\n", s.Name, s.Owner, s.TTL(), s.Held, s.Waiting)
	}
	return tw.Flush()
}

// membersCmd is `fencelock members`: the default group's membership (or
// --group's), and its subcommands add and remove, which change the default
// group's (the deployment's replicas). Changes need a token with admin:*.
func membersCmd(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "add":
			return membersAddCmd(args[1:])
		case "remove", "rm":
			return membersRemoveCmd(args[1:])
		case "replace":
			return membersReplaceCmd(args[1:]) // groups.go
		}
	}
	var f listFlags
	rest, err := f.parse("members", "[--group NAME] [flags] | add --id N --addr HOST:PORT [--voting] | remove ID | replace OLD NEW", args)
	if err != nil {
		return err
	}
	if _, err := parseBases(f.url); err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("members: unexpected argument %q (want add, remove or replace)", rest[0])
	}
	path := "/v1/members"
	if f.group != "" {
		path += "?" + url.Values{"group": {f.group}}.Encode()
	}
	var m httpapi.MembersJSON
	return f.get(path, &m, func() error { return printMembers(m) })
}

// printMembers is the table of a group's members, by replica ID, and the
// IDs removed from it.
func printMembers(m httpapi.MembersJSON) error {
	fmt.Printf("group %s, membership change index %d\n\n", groupName(m.Group), m.ConfigChangeIndex)
	type row struct {
		id         uint64
		addr, role string
	}
	var rows []row
	for id, a := range m.Voters {
		rows = append(rows, row{id, a, "voter"})
	}
	for id, a := range m.NonVoting {
		rows = append(rows, row{id, a, "non-voting"})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].id < rows[j].id })
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tRAFT ADDRESS\tROLE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.id, r.addr, r.role)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.Removed) > 0 {
		ids := make([]string, len(m.Removed))
		for i, id := range m.Removed {
			ids[i] = fmt.Sprint(id)
		}
		fmt.Printf("\nremoved (never to be used again): %s\n", strings.Join(ids, ","))
	}
	return nil
}

// parseArgs is parseAll for a command that takes n arguments besides its
// flags, want describing them ("one FILE"): any other number is an error
// that names the command and says what it wants.
func parseArgs(fs *flag.FlagSet, args []string, n int, want string) ([]string, error) {
	rest, err := parseAll(fs, args)
	if err != nil {
		return nil, err
	}
	if len(rest) != n {
		return nil, fmt.Errorf("%s: want %s, got %d arguments", fs.Name(), want, len(rest))
	}
	return rest, nil
}

// parseAll parses fs's flags wherever they stand among args (`remove 3
// --http URL` as well as `remove --http URL 3`) and returns the other
// arguments in order; a "--" ends the flags, and every argument after it is
// an operand as typed.
func parseAll(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if taken := len(args) - len(left); taken > 0 && args[taken-1] == "--" {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// parseFlags is fs.Parse, except that a mistake is one line naming the
// command and how to list its flags, not the flag package's words followed
// by every flag; -h still prints the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	msg := err.Error()
	// "invalid value "x" for flag -group: why" says why last: lead with it.
	if v, why, ok := strings.Cut(strings.TrimPrefix(msg, "invalid value "), " for flag -"); ok && msg != strings.TrimPrefix(msg, "invalid value ") {
		name, why, _ := strings.Cut(why, ": ")
		if f := fs.Lookup(name); f != nil && (why == "parse error" || why == "value out of range") {
			why = fmt.Sprintf("%s; want a value such as %s", why, f.DefValue)
		}
		msg = fmt.Sprintf("--%s %s: %s", name, strings.Trim(v, `"`), why)
	} else if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = fmt.Sprintf("no flag --%s", name)
	}
	return fmt.Errorf("%s: %s (fencelock %s -h lists its flags)", fs.Name(), msg, fs.Name())
}

// membersAddCmd is `fencelock members add --id N --addr HOST:PORT
// [--voting]`: POST /v1/members.
func membersAddCmd(args []string) error {
	var f clientFlags
	fs := newFlags("members add", "--id N --addr HOST:PORT [--voting] [flags]")
	f.register(fs)
	id := fs.Uint64("id", 0, "the new replica's ID: never one that was removed (required)")
	addr := fs.String("addr", "", "the new replica's raft address, HOST:PORT (required)")
	voting := fs.Bool("voting", false, "make it a voter (promote it once it has caught up); without it, it is added non-voting")
	rest, err := parseAll(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return fmt.Errorf("members add: unexpected argument %q", rest[0])
	case *id == 0:
		return errors.New("members add: --id is required")
	case *addr == "":
		return errors.New("members add: --addr is required")
	}
	var resp httpapi.MemberChangeResponse
	req := httpapi.AddMemberRequest{ID: *id, Addr: *addr, Voting: *voting}
	if err := f.read(func(ctx context.Context, c *apiclient.Client) error {
		return c.Do(ctx, "POST", "/v1/members", req, &resp)
	}); err != nil {
		return err
	}
	role := "a non-voting replica (it applies the log and serves clients, and does not vote; --voting makes it a voter)"
	if *voting {
		role = "a voter"
	}
	fmt.Printf("replica %d at %s is %s; if it does not run yet, start it with: fencelock serve --join --id %d --addr %s ...\n", *id, *addr, role, *id, *addr)
	return printChange(resp)
}

// membersRemoveCmd is `fencelock members remove ID`: DELETE
// /v1/members/{id}.
func membersRemoveCmd(args []string) error {
	var f clientFlags
	fs := newFlags("members remove", "ID [flags]")
	f.register(fs)
	rest, err := parseArgs(fs, args, 1, "one replica ID")
	if err != nil {
		return err
	}
	id, err := strconv.ParseUint(rest[0], 10, 64)
	if err != nil || id == 0 {
		return fmt.Errorf("members remove: %q is not a replica ID (a positive integer)", rest[0])
	}
	var resp httpapi.MemberChangeResponse
	if err := f.read(func(ctx context.Context, c *apiclient.Client) error {
		return c.Do(ctx, "DELETE", fmt.Sprintf("/v1/members/%d", id), nil, &resp)
	}); err != nil {
		return err
	}
	fmt.Printf("replica %d is removed for good: its ID can never be used again\n", id)
	return printChange(resp)
}

// printChange prints the membership a change answered with, if it came.
func printChange(resp httpapi.MemberChangeResponse) error {
	if resp.Members == nil {
		fmt.Println("(the membership after the change could not be read: run fencelock members)")
		return nil
	}
	fmt.Println()
	return printMembers(*resp.Members)
}
