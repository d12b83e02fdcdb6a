package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	apiclient "github.com/fencelock/fencelock/client"
)

// status never shows a voter it cannot reach as leader or follower: with
// an --http URL not answering, a voter that answered none is shown by its
// raft port (open: the view's role; refused: NOT RUNNING; no answer:
// UNCONFIRMED), and every voter shown as not reached makes the error that
// exits non-zero.
func TestVoterRoles(t *testing.T) {
	st := apiclient.ReplicaStatus{ReplicaID: 1, LeaderID: 3,
		Voters: map[string]string{"1": "h:1", "2": "h:2", "3": "h:3"}, NonVoting: map[string]string{"4": "h:4"}}
	roles := func(rows []roleRow) map[string]string {
		m := map[string]string{}
		for _, r := range rows {
			m[r.id] = r.role
		}
		return m
	}
	ans := func(dead bool, ids ...string) answers {
		a := answers{byID: map[string]string{}, status: map[uint64]apiclient.ReplicaStatus{}}
		for _, id := range ids {
			a.byID[id] = "http://" + id
		}
		if dead {
			a.dead = []string{"http://gone: refused"}
		}
		return a
	}
	noDial := func(string) reach {
		t.Fatal("dialled a voter that answered or with every URL answering")
		return reachUnknown
	}

	// Every URL answers: replica 3 is outside --http, the view decides.
	rows, _, err := voterRoles(st, ans(false, "1", "2"), noDial)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"1": "follower", "2": "follower", "3": "leader", "4": "non-voting"}, roles(rows))
	require.Equal(t, "1", rows[0].id)

	// A URL does not answer, and the leader answered none: its raft port says.
	for _, tc := range []struct {
		r    reach
		role string
		bad  bool
	}{
		{reachOK, "leader", false},
		{reachRefused, "NOT RUNNING (its raft port refuses)", true},
		{reachUnknown, "UNCONFIRMED (leader as 1 sees it)", true},
	} {
		var dialled []string
		rows, bad, err := voterRoles(st, ans(true, "1", "2"), func(a string) reach { dialled = append(dialled, a); return tc.r })
		require.Equal(t, []string{"h:3"}, dialled, "only the voter that answered no URL")
		require.Equal(t, tc.role, roles(rows)["3"])
		require.Equal(t, "follower", roles(rows)["2"])
		if tc.bad {
			require.ErrorIs(t, err, ErrVoterNotReached)
			require.Contains(t, err.Error(), "replica 3")
			require.Len(t, bad, 1)
		} else {
			require.NoError(t, err)
		}
	}

	// The leader's view names a voter it does not hear from.
	lead := st
	lead.ReplicaID, lead.Unreachable = 3, []uint64{2}
	a := ans(false, "1", "3")
	a.status[3] = lead
	rows, bad, err := voterRoles(st, a, noDial)
	require.Equal(t, map[string]string{"2": "UNREACHABLE"}, bad)
	require.ErrorIs(t, err, ErrVoterNotReached)
	require.Equal(t, "UNREACHABLE from 3", roles(rows)["2"])
	require.Equal(t, "leader", roles(rows)["3"])
}

// dialRaft tells a refused port from an open one.
func TestDialRaft(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.Equal(t, reachOK, dialRaft(addr))
	require.NoError(t, l.Close())
	require.Equal(t, reachRefused, dialRaft(addr))
	require.Equal(t, reachUnknown, dialRaft("not an address"))
}

// Issue 37: right after a replica is killed, before the others' views
// notice, status shows it neither as leader nor as follower, and exits
// non-zero; the killed leader alike.
func TestStatusRightAfterKill(t *testing.T) {
	p := startProcs(t)
	all := p.urls[1] + "," + p.urls[2] + "," + p.urls[3]
	leader := p.leader(1)
	require.NotZero(t, leader)
	out, err := exec.Command(p.bin, "status", "--http", all).CombinedOutput()
	require.NoError(t, err, "%s", out)

	row := func(out string, id uint64) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == fmt.Sprint(id) || len(f) > 1 && f[0]+" "+f[1] == fmt.Sprint(id)+" (this)" {
				return l
			}
		}
		return ""
	}
	follower := leader%3 + 1
	asker := (leader+1)%3 + 1 // neither: its view is the one shown first
	list := p.urls[asker] + "," + p.urls[follower] + "," + p.urls[leader]
	p.Kill(follower)
	out, err = exec.Command(p.bin, "status", "--http", list).CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "status must exit non-zero with a replica killed: %v\n%s", err, out)
	t.Logf("status right after the kill of %d:\n%s", follower, out)
	r := row(string(out), follower)
	require.NotEmpty(t, r, "%s", out)
	require.NotContains(t, r, " follower", "%s", out)
	require.NotContains(t, r, " leader", "%s", out)
	require.Contains(t, string(out), "NOT ANSWERING: "+p.urls[follower], "%s", out)

	// -o json exits non-zero too.
	err = exec.Command(p.bin, "status", "--http", list, "-o", "json").Run()
	require.True(t, errors.As(err, &ee), "%v", err)

	p.Kill(leader)
	out, err = exec.Command(p.bin, "status", "--http", list).CombinedOutput()
	require.True(t, errors.As(err, &ee), "%v\n%s", err, out)
	t.Logf("status right after the kill of the leader %d too:\n%s", leader, out)
	for _, id := range []uint64{follower, leader} {
		r := row(string(out), id)
		require.NotEmpty(t, r, "%s", out)
		require.NotContains(t, r, " follower", "%s", out)
		require.NotContains(t, r, " leader", "%s", out)
	}
	require.Contains(t, string(out), fmt.Sprintf("%d (NOT RUNNING)", leader), "the group's leader as the view has it, marked: %s", out)
}
