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

func locksCmd(args []string) error {
	var f listFlags
	rest, c, err := f.parse("locks", "[flags] [PREFIX]", args)
	if err != nil {
		return err
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
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tHOLDER SESSION\tTOKEN\tOWNER\tWAITERS\tQUEUE")
	for _, l := range all {
		q := make([]string, len(l.Queue))
		for i, id := range l.Queue {
			q[i] = id.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", l.Name, l.HolderSession, l.FencingToken, l.Owner, l.Waiters, strings.Join(q, ","))
	}
	return tw.Flush()
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
	fmt.Fprintln(tw, "SESSION\tOWNER\tTTL\tHELD\tWAITING")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%d\n", s.SessionID, s.Owner, time.Duration(s.TimeoutMS)*time.Millisecond, s.Held, s.Waiting)
	}
	return tw.Flush()
}
