package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
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
	out, stderr, code, err := runCLI("apikey", "create", "--data-dir", s.dataDir, "--team", "burstb")
	if err != nil || code != 0 {
		t.Fatalf("apikey create --team burstb: code %d, %v: %s", code, err, stderr)
	}
	keyB := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
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

	ids := func(ds []done, who string) (out []string, last time.Duration, ats []time.Duration) {
		for _, d := range ds {
			if d.err != nil || d.status != http.StatusCreated {
				t.Errorf("team %s: create: status %d, %v", who, d.status, d.err)
				continue
			}
			out = append(out, d.id)
			ats = append(ats, d.at)
			last = max(last, d.at)
		}
		slices.Sort(ats)
		return out, last, ats
	}
	idsA, lastA, atsA := ids(a, "A")
	idsB, lastB, _ := ids(b, "B")
	t.Cleanup(func() { killAll(t, c, s, idsA); killAllAs(t, c, s, keyB, idsB) })
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
