package main

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/testkit/hostleak"
)

// TestLoadTwoTeams: while one team's burst waits in a real server's
// admission queue (default settings), a second team's smaller burst is
// served in turn with it, not after it: every create of both is a 201, and
// a good part of the first team's burst (a quarter at least) is still
// being created when the second team's last sandbox is up. Without per-team
// turns the second team would wait behind the whole first burst and finish
// with or after its last create.
func TestLoadTwoTeams(t *testing.T) {
	rootfs := requireRealServer(t)
	s := startServer(t, newDataDir(t, rootfs))
	keyB, err := createAPIKey(s.dataDir, "--team", "burstb")
	if err != nil {
		t.Fatal(err)
	}
	const nA, nB = 40, 8
	c := loadClient()
	t0 := time.Now()
	type done struct {
		createResult
		at time.Duration // since t0, when the answer came
	}
	burst := func(key string, n int) []done {
		res := make([]done, n)
		var wg sync.WaitGroup
		for i := range res {
			wg.Go(func() {
				r := postCreateAs(context.Background(), c, s, key)
				res[i] = done{r, time.Since(t0)}
			})
		}
		wg.Wait()
		return res
	}
	var a, b []done
	var wg sync.WaitGroup
	wg.Go(func() { a = burst(s.key, nA) })
	time.Sleep(150 * time.Millisecond) // A's burst is queued by now
	wg.Go(func() { b = burst(keyB, nB) })
	wg.Wait()

	// created returns the IDs of ds's sandboxes and when each answer came, in order.
	created := func(ds []done, who string) (ids []string, ats []time.Duration) {
		for _, d := range ds {
			if d.err != nil || d.status != http.StatusCreated {
				t.Errorf("team %s: create: status %d, %v", who, d.status, d.err)
				continue
			}
			ids = append(ids, d.id)
			ats = append(ats, d.at)
		}
		slices.Sort(ats)
		return ids, ats
	}
	idsA, atsA := created(a, "A")
	idsB, atsB := created(b, "B")
	t.Cleanup(func() { killAll(t, c, s, idsA); killAllAs(t, c, s, keyB, idsB) })
	if len(atsA) == 0 || len(atsB) == 0 {
		t.FailNow() // the creates' errors are reported above
	}
	lastA, lastB := atsA[len(atsA)-1], atsB[len(atsB)-1]
	after := 0 // A's creates answered after B's last
	if i := slices.IndexFunc(atsA, func(d time.Duration) bool { return d > lastB }); i >= 0 {
		after = len(atsA) - i
	}
	t.Logf("team A: %d creates, last up after %s; team B (150 ms later): %d creates, last up after %s; A's creates up after B's last: %d",
		len(idsA), lastA.Round(time.Millisecond), len(idsB), lastB.Round(time.Millisecond), after)
	if len(idsA) == nA && len(idsB) == nB && after < nA/4 {
		t.Errorf("team B finished after all but %d of team A's %d creates: it waited behind A's burst", after, nA)
	}
	killAll(t, c, s, idsA)
	killAllAs(t, c, s, keyB, idsB)
	hostleak.WaitNone(t, 20*time.Second, s.dataDir, append(idsA, idsB...)...)
	idsA, idsB = nil, nil
}
