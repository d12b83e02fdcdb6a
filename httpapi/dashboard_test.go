package httpapi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
)

// chromium finds Debian's chromium (installed by .ci/run). With CI set a
// missing browser fails the test: CI must run it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found, and CI is set: install it (.ci/run does: apt-get install -y chromium)")
	}
	t.Skip("chromium not found; set CI=1 to make this a failure")
	return ""
}

// browser starts headless chromium at exe; the first call on the context
// it returns starts it. It ends with the test, before what the test set up
// earlier (a group to show).
func browser(t *testing.T, exe string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.DisableGPU)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	return bctx
}

// The dashboard, in a real headless browser: the page loads, shows the
// members, the leader and every group with its leader, and a lock taken
// through the API appears with its holder, pushed by the watch stream. With
// two of three replicas stopped, the page marks both unreachable (not
// "follower") and the group as having NO LEADER.
func TestDashboard(t *testing.T) {
	exe := chromium(t)
	g := newGroup(t, true)
	bctx := browser(t, exe)
	const name = "jobs/dash"
	// The first call starts the browser, which lives as long as its
	// context: no timeout on that one.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(g.urls[2]+"/#watch="+name)))
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	err := chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](`document.querySelector("#members")?.textContent.includes("leader")`,
			chromedp.WithPollingTimeout(60*time.Second)),
		// The default group's row names its leader.
		chromedp.Poll[chromedp.Void](`/^\(default\)[0-9a-f]+[123]1, 2, 3/.test(document.querySelector('tr[data-group=""]')?.textContent)`,
			chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-lock="`+name+`"]')?.textContent.includes("free")`,
			chromedp.WithPollingTimeout(30*time.Second)),
	)
	require.NoError(t, err)

	sid := newSession(t, g.urls[1], 10000)
	r := call(t, "POST", lockURL(g.urls[1], name, "acquire"), map[string]any{"session_id": sid, "wait": false})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	token := r.Str("fencing_token")

	err = chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector('tr[data-lock="%s"]')?.textContent.includes("%s")`, name, sid),
			chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err)
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-lock="`+name+`"]').textContent`))
	require.NoError(t, err)
	require.Contains(t, text, token)
	t.Logf("dashboard row: %q", text)
	// A second lock nobody watched yet turns up from the periodic listing.
	r = call(t, "POST", lockURL(g.urls[3], "other", "acquire"), map[string]any{"session_id": newSession(t, g.urls[3], 10000)})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	err = chromedp.Do(ctx, chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-lock="other"]') !== null`,
		chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err)

	// Issue 27: a lock held by a session named reindex@worker-3 shows that
	// name and how long it has been held; its waiter's name and place show
	// in the queue and in the most contended; an election nobody typed in
	// is listed with its leader's name; every table has a legend.
	holder := newNamedSession(t, g.urls[1], "reindex@worker-3")
	r = call(t, "POST", lockURL(g.urls[1], "jobs/reindex", "acquire"), map[string]any{"session_id": holder})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	waiter := newNamedSession(t, g.urls[3], "backfill@worker-7")
	r = call(t, "POST", lockURL(g.urls[3], "jobs/reindex", "acquire"), map[string]any{"session_id": waiter, "wait": true})
	require.Equal(t, false, r.Body["granted"], r.Raw)
	r = call(t, "POST", g.urls[2]+"/v1/elections/orders%2Fprimary/campaign", map[string]any{"session_id": holder, "value": "10.0.0.9"})
	require.Equal(t, true, r.Body["elected"], r.Raw)
	const reindexRow = `document.querySelector('tr[data-lock="jobs/reindex"]')?.textContent ?? ""`
	// "held for" renders whole seconds: wait for it to pass 0s, so that the
	// assertion sees a time that counts.
	err = chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](`(`+reindexRow+`).includes("reindex@worker-3") && /[1-9][0-9]*s/.test(`+
			`document.querySelector('tr[data-lock="jobs/reindex"] td:nth-child(3)')?.textContent ?? "")`,
			chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`(document.querySelector('tr[data-contended="jobs/reindex"]')?.textContent ?? "").includes("backfill@worker-7")`,
			chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`(document.querySelector('tr[data-election="orders/primary"]')?.textContent ?? "").includes("reindex@worker-3")`,
			chromedp.WithPollingTimeout(30*time.Second)),
	)
	if err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%v; the page:\n%s", err, page)
	}
	text, err = chromedp.Run(ctx, chromedp.Evaluate[string](reindexRow))
	require.NoError(t, err)
	require.Contains(t, text, "#1 backfill@worker-7", "the waiter, by name and place")
	t.Logf("dashboard row: %q", text)
	text, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-election="orders/primary"]').textContent`))
	require.NoError(t, err)
	require.Contains(t, text, "10.0.0.9")
	t.Logf("elections row: %q", text)
	text, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-session="`+holder+`"]')?.textContent ?? ""`))
	require.NoError(t, err)
	require.Contains(t, text, "reindex@worker-3")
	// Every column of the locks, contended, elections and sessions tables
	// has an entry in its legend.
	missing, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const out = [];
		for (const [table, legend] of [["locks", "locks-legend"], ["contended", "contended-legend"], ["elections", "elections-legend"], ["sessions", "sessions-legend"]]) {
			const terms = [...document.querySelectorAll("#" + legend + " dt")].map(d => d.textContent);
			for (const th of document.getElementById(table).closest("table").querySelectorAll("th")) {
				if (!terms.some(term => term.split(/, /).some(x => th.textContent.startsWith(x)))) out.push(table + ": " + th.textContent);
			}
		}
		return out.join("; ");
	})()`))
	require.NoError(t, err)
	require.Empty(t, missing, "columns without a legend entry")

	gone, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#members").textContent + document.querySelector("#noleader").textContent`))
	require.NoError(t, err)
	require.NotContains(t, gone, "unreachable")
	require.NotContains(t, gone, "NO LEADER")

	// Two of three replicas stop: the page of the third says so.
	g.Node(1).Close()
	g.Node(3).Close()
	err = chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](`["1", "3"].every(id => document.querySelector('tr[data-replica="' + id + '"]')?.textContent.includes("unreachable"))`,
			chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-group=""]')?.textContent.includes("NO LEADER")`,
			chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelector("#noleader").textContent.startsWith("NO LEADER in (default)")`,
			chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err)
	text, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#members").textContent`))
	require.NoError(t, err)
	require.NotContains(t, text, "leader", "no replica is shown as leader: %s", text)
	t.Logf("members with two replicas stopped: %q", text)
}

// Under placement own, the groups table also lists the groups a replica
// reaches through a mirror, with the voter that feeds each.
func TestDashboardShowsMirrors(t *testing.T) {
	exe := chromium(t)
	g := newGroupWith(t, func(c *fencelock.Config) {
		c.Placement = fencelock.PlaceOwnGroups
		c.Groups = []fencelock.GroupConfig{{Name: "solo", Voters: []uint64{2}}}
	}, true)
	// A lock of solo taken through replica 1 opens its mirror there.
	sid := newSession(t, g.urls[1], 10000)
	require.Eventually(t, func() bool {
		r := call(t, "POST", lockURL(g.urls[1], "job@solo", "acquire"), map[string]any{"session_id": sid, "wait": false})
		return r.Body["granted"] == true
	}, 60*time.Second, 50*time.Millisecond, "solo's lock through replica 1")

	bctx := browser(t, exe)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(g.urls[1]+"/")))
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-mirror="solo"]')?.textContent.includes("mirror, fed by 2")`,
			chromedp.WithPollingTimeout(60*time.Second))))
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-mirror="solo"]').textContent`))
	require.NoError(t, err)
	require.Contains(t, text, "solo")
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-group="solo"]').length`))
	require.NoError(t, err)
	require.Zero(t, n, "replica 1 runs no shard of solo")
	const summary = `document.querySelector("#summary")?.textContent ?? ""`
	text, err = chromedp.Run(ctx, chromedp.Evaluate[string](summary))
	require.NoError(t, err)
	require.Contains(t, text, "0 locks held in the group this replica runs (1 mirrored group not counted)")

	// The summary counts the locks of every group the replica runs, not
	// the default group's alone (it said "0 locks" beside job@solo).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(g.urls[2]+"/")))
	err = chromedp.Do(ctx, chromedp.Poll[chromedp.Void](`(`+summary+`).startsWith("1 lock held in the 2 groups this replica runs")`,
		chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](summary))
		t.Fatalf("%v; the summary: %q", err, text)
	}
}

// On a server that wants a bearer token, the page opened without one says
// how to give it one (#token=), not only that the token is missing.
func TestDashboardSaysHowToPassAToken(t *testing.T) {
	exe := chromium(t)
	acl, err := httpapi.ParseTokens([]byte("s3cret read:*\n"))
	require.NoError(t, err)
	g := newGroup(t, true, httpapi.WithACL(acl))
	bctx := browser(t, exe)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(g.urls[1]+"/")))
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	const errText = `document.querySelector("#error")?.textContent ?? ""`
	err = chromedp.Do(ctx, chromedp.Poll[chromedp.Void](`(`+errText+`).includes("#token=YOUR_TOKEN")`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](errText))
		t.Fatalf("%v; the error shown: %q", err, text)
	}
	// With the token in the fragment the page reads the members.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(g.urls[1]+"/#token=s3cret"), chromedp.Reload()))
	require.NoError(t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](`document.querySelector("#members")?.textContent.includes("leader")`,
		chromedp.WithPollingTimeout(60*time.Second))))
}
