package main

// fencelock groups and fencelock members replace: the group table over the
// HTTP API (docs/http.md, "Groups").

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apiclient "github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/httpapi"
)

// changeCtx bounds a change of the group table: the server bounds it by
// httpapi.GroupChangeTimeout, and answers a change still under way then.
func changeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), httpapi.GroupChangeTimeout+15*time.Second)
}

// groupsCmd is `fencelock groups [list|create|drop|set-voters]`.
func groupsCmd(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list", "ls":
			args = args[1:]
		case "create":
			return groupsCreateCmd(args[1:])
		case "drop":
			return groupsDropCmd(args[1:])
		case "set-voters":
			return groupsSetVotersCmd(args[1:])
		}
	}
	var f listFlags
	rest, err := f.parseWith("groups", "[list] [flags] | create NAME ID,ID,... | drop NAME [--force] | set-voters NAME ID,ID,...", args, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("groups: unexpected argument %q (want list, create, drop or set-voters)", rest[0])
	}
	var gs httpapi.GroupsJSON
	return f.get("/v1/groups", &gs, func() error { return printTable(gs) })
}

// printTable is the table of named groups: each one's voters and the
// replicas taken off it for good.
func printTable(gs httpapi.GroupsJSON) error {
	if len(gs.Groups) == 0 {
		fmt.Println("no named groups: every name is in the default group (create one: fencelock groups create NAME ID,ID,...)")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tVOTERS\tREMOVED\tSHARD")
	for _, g := range gs.Groups {
		removed := ids(g.Removed)
		if removed == "" {
			removed = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Name, ids(g.Voters), removed, g.ShardID)
	}
	return tw.Flush()
}

// ids writes replica IDs as "1,2,3".
func ids(v []uint64) string {
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

// parseIDs reads "1,2,3" (spaces allowed) as positive replica IDs.
func parseIDs(what, s string) ([]uint64, error) {
	var out []uint64
	for _, x := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(x), 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%s: %q is not a positive replica ID", what, x)
		}
		out = append(out, id)
	}
	return out, nil
}

// votersChange is the NAME ID,ID,... of create and set-voters, and the
// flags of the client to send it with.
type votersChange struct {
	f      clientFlags
	name   string
	voters []uint64
}

// parseVotersChange parses the arguments of groups sub (create or
// set-voters).
func parseVotersChange(sub string, args []string) (votersChange, error) {
	var f clientFlags
	fs := newFlags("groups "+sub, "NAME ID,ID,... [flags]")
	f.register(fs)
	rest, err := parseArgs(fs, args, 2, "NAME and its voters (ID,ID,...)")
	if err != nil {
		return votersChange{}, err
	}
	voters, err := parseIDs("groups "+sub, rest[1])
	if err != nil {
		return votersChange{}, err
	}
	if _, err := parseBases(f.url); err != nil {
		return votersChange{}, err
	}
	return votersChange{f: f, name: rest[0], voters: voters}, nil
}

// send sends the voters with method to the group's path, /v1/groups/NAME
// and suffix, on c, and returns the group as the table has it after.
func (v votersChange) send(ctx context.Context, c *apiclient.Client, method, suffix string) (httpapi.TableGroupJSON, error) {
	var g httpapi.TableGroupJSON
	err := c.Do(ctx, method, "/v1/groups/"+url.PathEscape(v.name)+suffix, httpapi.VotersRequest{Voters: v.voters}, &g)
	return g, err
}

// groupsCreateCmd is `fencelock groups create NAME ID,ID,...`: POST
// /v1/groups/{name}.
func groupsCreateCmd(args []string) error {
	v, err := parseVotersChange("create", args)
	if err != nil {
		return err
	}
	return v.f.change(func(ctx context.Context, c *apiclient.Client) error {
		g, err := v.send(ctx, c, "POST", "")
		var ae *apiclient.Error
		if errors.As(err, &ae) && ae.Code == httpapi.CodeGroupExists {
			// A create that applied and whose answer was lost, asked again of
			// another replica: done, if the group is the one asked for.
			if g, ok := findGroup(ctx, c, v.name); ok && ids(g.Voters) == ids(slices.Sorted(slices.Values(v.voters))) {
				fmt.Printf("group %s runs, voters %s\n", v.name, ids(g.Voters))
				return nil
			}
		}
		if err != nil {
			return err
		}
		fmt.Printf("group %s created, voters %s: names ending in @%s live in it\n", g.Name, ids(g.Voters), g.Name)
		return nil
	})
}

// findGroup reads the table and returns group name, if it has it.
func findGroup(ctx context.Context, c *apiclient.Client, name string) (httpapi.TableGroupJSON, bool) {
	var gs httpapi.GroupsJSON
	if err := c.Do(ctx, "GET", "/v1/groups", nil, &gs); err != nil {
		return httpapi.TableGroupJSON{}, false
	}
	for _, g := range gs.Groups {
		if g.Name == name {
			return g, true
		}
	}
	return httpapi.TableGroupJSON{}, false
}

// groupsDropCmd is `fencelock groups drop NAME [--force]`: DELETE
// /v1/groups/{name}.
func groupsDropCmd(args []string) error {
	var f clientFlags
	fs := newFlags("groups drop", "NAME [--force] [flags]")
	f.register(fs)
	force := fs.Bool("force", false, "drop it even though it holds locks: their sessions' parts in the group are ended first (their holders see their locks revoked)")
	rest, err := parseArgs(fs, args, 1, "one group name")
	if err != nil {
		return err
	}
	name := rest[0]
	if _, err := parseBases(f.url); err != nil {
		return err
	}
	path := "/v1/groups/" + url.PathEscape(name)
	if *force {
		path += "?force=true"
	}
	var resp httpapi.DropResponse
	if err := f.change(func(ctx context.Context, c *apiclient.Client) error {
		return c.Do(ctx, "DELETE", path, nil, &resp)
	}); err != nil {
		return err
	}
	fmt.Printf("group %s dropped: its raft data is removed from every replica\n", name)
	return nil
}

// groupsSetVotersCmd is `fencelock groups set-voters NAME ID,ID,...`: PUT
// /v1/groups/{name}/voters.
func groupsSetVotersCmd(args []string) error {
	v, err := parseVotersChange("set-voters", args)
	if err != nil {
		return err
	}
	var g httpapi.TableGroupJSON
	if err := v.f.change(func(ctx context.Context, c *apiclient.Client) (err error) {
		g, err = v.send(ctx, c, "PUT", "/voters")
		return err
	}); err != nil {
		return err
	}
	fmt.Printf("group %s votes on %s", g.Name, ids(g.Voters))
	if len(g.Removed) > 0 {
		fmt.Printf(" (taken off it for good: %s)", ids(g.Removed))
	}
	fmt.Println()
	return nil
}

// membersReplaceCmd is `fencelock members replace OLD NEW`: POST
// /v1/members/{old}/replace.
func membersReplaceCmd(args []string) error {
	var f clientFlags
	fs := newFlags("members replace", "OLD NEW [flags]")
	f.register(fs)
	rest, err := parseArgs(fs, args, 2, "OLD and NEW replica IDs")
	if err != nil {
		return err
	}
	pair, err := parseIDs("members replace", rest[0]+","+rest[1])
	if err != nil {
		return err
	}
	var resp httpapi.MemberChangeResponse
	if err := f.change(func(ctx context.Context, c *apiclient.Client) error {
		return c.Do(ctx, "POST", fmt.Sprintf("/v1/members/%d/replace", pair[0]), httpapi.ReplaceRequest{New: pair[1]}, &resp)
	}); err != nil {
		return err
	}
	fmt.Printf("replica %d took replica %d's place in every group; %d is removed for good: delete its Dir\n", pair[1], pair[0], pair[0])
	return printChange(resp)
}
