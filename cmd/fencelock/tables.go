package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelock/fencelock/httpapi"
)

// listFlags are the flags of status, locks and sessions.
type listFlags struct {
	clientFlags
	output string
}

func (f *listFlags) parse(name, argsUsage string, args []string) ([]string, *client, error) {
	fs := newFlags(name, argsUsage)
	f.register(fs)
	fs.StringVar(&f.output, "o", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if f.output != "table" && f.output != "json" {
		return nil, nil, fmt.Errorf("%s: -o %q: want table or json", name, f.output)
	}
	c, err := f.client()
	return fs.Args(), c, err
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

func statusCmd(args []string) error {
	var f listFlags
	rest, c, err := f.parse("status", "[flags]", args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("status: unexpected argument %q", rest[0])
	}
	ctx, cancel := callCtx()
	defer cancel()
	var raw json.RawMessage
	if err := c.do(ctx, "GET", "/v1/status", nil, &raw); err != nil {
		return err
	}
	if f.output == "json" {
		return printJSON(raw)
	}
	var st httpapi.StatusJSON
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	fmt.Printf("replica %d, group %s, term %d, applied index %d\n", st.ReplicaID, st.GroupID, st.Term, st.AppliedIndex)
	fmt.Printf("%d sessions, %d locks held, %d waiting\n\n", st.Sessions, st.LocksHeld, st.Waiters)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tRAFT ADDRESS\tROLE")
	type m struct{ id, addr, role string }
	var ms []m
	for id, a := range st.Voters {
		role := "follower"
		if id == fmt.Sprint(st.LeaderID) {
			role = "leader"
		}
		ms = append(ms, m{id, a, role})
	}
	for id, a := range st.NonVoting {
		ms = append(ms, m{id, a, "non-voting"})
	}
	sort.Slice(ms, func(i, j int) bool {
		return len(ms[i].id) < len(ms[j].id) || len(ms[i].id) == len(ms[j].id) && ms[i].id < ms[j].id
	})
	for _, x := range ms {
		this := ""
		if x.id == fmt.Sprint(st.ReplicaID) {
			this = " (this)"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\n", x.id, this, x.addr, x.role)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printGroups(st.Groups)
}

// printGroups lists every group and its leader.
func printGroups(groups []httpapi.GroupJSON) error {
	if len(groups) == 0 {
		return nil // a server from before groups
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tGROUP ID\tLEADER\tVOTERS\tTHIS REPLICA\tLOCKS")
	for _, g := range groups {
		name := g.Name
		if name == "" {
			name = "(default)"
		}
		leader := "none"
		if g.LeaderID != 0 {
			leader = fmt.Sprint(g.LeaderID)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", name, g.GroupID, leader, strings.Join(voters, ","), role, g.LocksHeld)
	}
	return tw.Flush()
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
func holderNames(l httpapi.LockJSON) string {
	if len(l.Holders) == 0 {
		return "-"
	}
	names := make([]string, len(l.Holders))
	for i, h := range l.Holders {
		names[i] = h.Name
		if names[i] == "" {
			names[i] = h.Session.String()
		}
	}
	return strings.Join(names, ",")
}

// waiterNames lists a lock's listed waiters, head first, each by session
// name (the ID for one without a name).
func waiterNames(l httpapi.LockJSON) string {
	if len(l.Waiting) == 0 { // a server from before names: the IDs
		q := make([]string, len(l.Queue))
		for i, id := range l.Queue {
			q[i] = id.String()
		}
		return strings.Join(q, ",")
	}
	q := make([]string, len(l.Waiting))
	for i, w := range l.Waiting {
		q[i] = w.Name
		if q[i] == "" {
			q[i] = w.Session.String()
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
	fs := newFlags("locks", "[flags] [PREFIX]")
	f.register(fs)
	fs.StringVar(&f.output, "o", "table", "output: table or json")
	fs.StringVar(&sortBy, "sort", "name", `"name": every held lock in name order; "waiters": the locks with the longest queues, longest first`)
	fs.IntVar(&top, "n", 10, "with --sort waiters: how many locks (1 to 100)")
	fs.StringVar(&group, "group", "", "with --sort waiters: the group to rank (default: the default group)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.output != "table" && f.output != "json" {
		return fmt.Errorf("locks: -o %q: want table or json", f.output)
	}
	if sortBy != "name" && sortBy != "waiters" {
		return fmt.Errorf("locks: --sort %q: want name or waiters", sortBy)
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	rest := fs.Args()
	if sortBy == "waiters" {
		if len(rest) > 0 {
			return fmt.Errorf("locks: --sort waiters ranks every lock of a group: no PREFIX (got %q)", rest[0])
		}
		return contendedCmd(c, f.output, group, top)
	}
	if len(rest) > 1 {
		return fmt.Errorf("locks: want at most one PREFIX, got %d", len(rest))
	}
	prefix := ""
	if len(rest) == 1 {
		prefix = rest[0]
	}
	ctx, cancel := callCtx()
	defer cancel()
	var all []httpapi.LockJSON
	after := ""
	for {
		var raw json.RawMessage
		q := url.Values{"prefix": {prefix}}
		if after != "" {
			q.Set("after", after)
		}
		if err := c.do(ctx, "GET", "/v1/locks?"+q.Encode(), nil, &raw); err != nil {
			return err
		}
		var page httpapi.LockList
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		all = append(all, page.Locks...)
		if !page.More || page.Next == "" {
			break
		}
		after = page.Next
	}
	if f.output == "json" {
		b, _ := json.Marshal(httpapi.LockList{Locks: all})
		return printJSON(b)
	}
	return printLocks(all)
}

// printLocks is the table of locks and contended.
func printLocks(all []httpapi.LockJSON) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tHOLDER\tHELD FOR\tHOLDER SESSION\tTOKEN\tOWNER\tWAITERS\tQUEUE (HEAD FIRST)")
	for _, l := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", l.Name, holderNames(l), heldFor(l.HeldForMS, l.GrantedAt),
			l.HolderSession, l.FencingToken, l.Owner, l.Waiters, waiterNames(l))
	}
	return tw.Flush()
}

// contendedCmd is locks --sort waiters: GET /v1/locks?sort=waiters.
func contendedCmd(c *client, output, group string, n int) error {
	ctx, cancel := callCtx()
	defer cancel()
	q := url.Values{"sort": {"waiters"}, "limit": {fmt.Sprint(n)}}
	if group != "" {
		q.Set("group", group)
	}
	var raw json.RawMessage
	if err := c.do(ctx, "GET", "/v1/locks?"+q.Encode(), nil, &raw); err != nil {
		return err
	}
	if output == "json" {
		return printJSON(raw)
	}
	var page httpapi.LockList
	if err := json.Unmarshal(raw, &page); err != nil {
		return err
	}
	return printLocks(page.Locks)
}

func sessionsCmd(args []string) error {
	var f listFlags
	rest, c, err := f.parse("sessions", "[flags]", args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("sessions: unexpected argument %q", rest[0])
	}
	ctx, cancel := callCtx()
	defer cancel()
	var all []httpapi.SessionJSON
	after := ""
	for {
		path := "/v1/sessions"
		if after != "" {
			path += "?after=" + after
		}
		var page httpapi.SessionList
		if err := c.do(ctx, "GET", path, nil, &page); err != nil {
			return err
		}
		all = append(all, page.Sessions...)
		if !page.More || page.Next == "" {
			break
		}
		after = page.Next
	}
	if f.output == "json" {
		b, _ := json.Marshal(httpapi.SessionList{Sessions: all})
		return printJSON(b)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tNAME\tOWNER\tTTL\tHELD\tWAITING")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%d\t%d\n", s.SessionID, s.Name, s.Owner, time.Duration(s.TimeoutMS)*time.Millisecond, s.Held, s.Waiting)
	}
	return tw.Flush()
}
