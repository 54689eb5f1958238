package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/runtime"
	"github.com/moatsh/moat/internal/runtime/vm/guestenvd"
	"github.com/moatsh/moat/internal/runtime/vm/launch"
	"github.com/moatsh/moat/internal/runtime/vm/memfile"
	"github.com/moatsh/moat/internal/runtime/vm/qemu"
	"github.com/moatsh/moat/internal/runtime/vm/snapshot"
)

// BenchmarkPauseResume measures Pause and Resume of guests with 256 MiB,
// 1 GiB and 2 GiB of touched memory (MOAT_BENCH_PAUSE_MIB="256,1024,2048"),
// against the plain QEMU migrate-to-file mechanism as the baseline, on the
// same guest in the same run:
//
//   - moat: stop, save the device state only (guest RAM already lives in the
//     sandbox's memory file), fdatasync mem/disk/state, keep the stopped
//     QEMU (kept_linux.go); resume consumes the state and continues it.
//   - moat, QEMU gone (a resume after the kept QEMU was let go: later than
//     keepFor, after a restart): the same pause, then QEMU quits; resume is
//     a new QEMU mapping the memory file, loading the device state only.
//     The network and cgroup teardown runs (untimed) before the resume is
//     timed. Measured in the idle rounds and the little row, by a second
//     pause after the first round trip.
//   - baseline: stop, migrate all guest RAM into one file (x-ignore-shared
//     off), fsync it, quit QEMU; resume is a new QEMU loading all of it.
//
// Each size is measured "hot" (paused right after the guest rewrote all of
// the touched memory: what is still dirty then depends on the host's
// writeback, which runs during the rewrite: the Runtime starts it every
// flushEvery, see flush_linux.go) and "idle" (the host wrote the memory
// file back first). A "little" row pauses a fresh sandbox that touched
// almost nothing since its restore. Each pause's written bytes are what
// its sync wrote (dirty pages, by cachestat(2)) plus the state file.
// MOAT_BENCH_PAUSE_ROUNDS sets the rounds per variant (default 3). Under
// TCG the guest writes memory at ~100 MB/s, so a hot round of 2 GiB takes
// about half a minute. Its checks that the guest's memory came back
// (checkFill) are also made, one round at 64 MiB, by the ordinary test
// TestPauseResumeFilledMemory, and by TestKeptResume and TestKeptReleased.
func BenchmarkPauseResume(b *testing.B) {
	pauseBenchOnce.Do(func() { runPauseBench(b) })
}

var pauseBenchOnce sync.Once

func runPauseBench(b *testing.B) {
	r := testRuntime(b)
	withKept(b, r, 4, time.Hour)
	rounds := 3
	if s := os.Getenv("MOAT_BENCH_PAUSE_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("MOAT_BENCH_PAUSE_ROUNDS: bad value %q", s)
		}
		rounds = n
	}
	sizes := []int{256, 1024, 2048}
	if s := os.Getenv("MOAT_BENCH_PAUSE_MIB"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("MOAT_BENCH_PAUSE_MIB: bad size %q", f)
			}
			sizes = append(sizes, n)
		}
	}
	rows := []pauseRow{benchPauseLittle(b, r, rounds)}
	for _, mib := range sizes {
		rows = append(rows, benchPauseSize(b, r, mib, rounds))
	}
	b.StopTimer()
	printPauseTable(rows)
}

type pauseRow struct {
	mib                   int
	hotPause, hotResume   []time.Duration
	idlePause, idleResume []time.Duration
	basePause, baseResume []time.Duration
	stateBytes            int64           // size of the baseline's migration file
	hotDirty              []int64         // host Dirty (MiB) right before a hot pause
	hotBytes, idleBytes   []int64         // what each pause wrote
	coldResume            []time.Duration // resumes in a new QEMU (kept one let go)
}

// coldResume pauses sandbox id again, lets its kept QEMU go and times its
// resume in a new QEMU.
func coldResume(b *testing.B, r *Runtime, row *pauseRow, id string) *runtime.Handle {
	ctx := context.Background()
	time.Sleep(time.Second) // see benchPauseLittle
	if err := r.Pause(ctx, id); err != nil {
		b.Fatal(err)
	}
	r.releaseKept(ctx, id)
	waitTornDown(b, r, id)
	r0 := time.Now()
	h, err := r.Resume(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	row.coldResume = append(row.coldResume, time.Since(r0))
	return h
}

// add records one round of the hot or the idle variant.
func (row *pauseRow) add(idle bool, pause, resume time.Duration, written int64) {
	if idle {
		row.idlePause, row.idleResume = append(row.idlePause, pause), append(row.idleResume, resume)
		row.idleBytes = append(row.idleBytes, written)
		return
	}
	row.hotPause, row.hotResume = append(row.hotPause, pause), append(row.hotResume, resume)
	row.hotBytes = append(row.hotBytes, written)
}

// pauseWritten is what sandbox id's last Pause wrote.
func pauseWritten(r *Runtime, id string) int64 {
	bx, ok := r.boxes.Lookup(id)
	if !ok {
		return -1
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx.pauseWritten
}

// benchPauseLittle pauses and resumes a fresh sandbox that touched little
// memory since its restore (one small file in /tmp per round): its row
// has hot values only.
func benchPauseLittle(b *testing.B, r *Runtime, rounds int) pauseRow {
	ctx := context.Background()
	spec := testSpec(newID())
	h, err := r.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = r.Kill(ctx, spec.ID) }()
	row := pauseRow{}
	for i := 0; i < rounds; i++ {
		if _, err := run(h, "root", time.Minute, "sh", "-c", "mkdir -p /tmp/fill && echo "+strconv.Itoa(i)+" > /tmp/fill/round && echo x > /tmp/fill/data"); err != nil {
			b.Fatal(err)
		}
		// The guest kernel reports a carrier change at most once a
		// second (linkwatch), and Pause waits until the guest saw its
		// link go down: a pause within a second of the restore's link-up
		// waits out the rest of that second. Measure the steady state.
		time.Sleep(time.Second)
		p0 := time.Now()
		if err := r.Pause(ctx, spec.ID); err != nil {
			b.Fatal(err)
		}
		p1 := time.Now()
		written := pauseWritten(r, spec.ID)
		waitTornDown(b, r, spec.ID)
		r0 := time.Now()
		if h, err = r.Resume(ctx, spec.ID); err != nil {
			b.Fatal(err)
		}
		row.add(false, p1.Sub(p0), time.Since(r0), written)
		checkFill(b, h, i)
		h = coldResume(b, r, &row, spec.ID)
		checkFill(b, h, i)
	}
	return row
}

func benchPauseSize(b *testing.B, r *Runtime, mib, rounds int) pauseRow {
	ctx := context.Background()
	spec := testSpec(newID())
	spec.MemoryMiB = mib + 512 // room for the kernel, envd and the shell
	h, err := r.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = r.Kill(ctx, spec.ID) }()
	mountFill(b, h, mib)
	touch := func() {
		t0 := time.Now()
		fillGuest(b, h, mib)
		b.Logf("%d MiB of guest memory written in %s", mib, time.Since(t0).Round(time.Millisecond))
	}
	touch()
	row := pauseRow{mib: mib}
	mem := filepath.Join(r.sandboxDir(spec.ID), "mem")
	for _, idle := range []bool{false, true} {
		for i := 0; i < rounds; i++ {
			if _, err := run(h, "root", time.Minute, "sh", "-c", "echo "+strconv.Itoa(i)+" > /tmp/fill/round"); err != nil {
				b.Fatal(err)
			}
			if idle {
				if err := memfile.SyncFiles(mem); err != nil {
					b.Fatal(err)
				}
				time.Sleep(time.Second) // see benchPauseLittle
			} else {
				if i > 0 {
					touch()
				}
				row.hotDirty = append(row.hotDirty, hostDirtyMiB())
			}
			p0 := time.Now()
			if err := r.Pause(ctx, spec.ID); err != nil {
				b.Fatal(err)
			}
			p1 := time.Now()
			written := pauseWritten(r, spec.ID)
			waitTornDown(b, r, spec.ID)
			r0 := time.Now()
			if h, err = r.Resume(ctx, spec.ID); err != nil {
				b.Fatal(err)
			}
			p2 := time.Now()
			checkFill(b, h, i)
			row.add(idle, p1.Sub(p0), p2.Sub(r0), written)
			if idle {
				h = coldResume(b, r, &row, spec.ID)
				checkFill(b, h, i)
			}
		}
	}
	state := filepath.Join(os.TempDir(), "moat-baseline-"+spec.ID)
	defer os.Remove(state)
	for i := 0; i < rounds; i++ {
		if _, err := run(h, "root", time.Minute, "sh", "-c", "echo "+strconv.Itoa(100+i)+" > /tmp/fill/round"); err != nil {
			b.Fatal(err)
		}
		p0 := time.Now()
		if err := baselinePause(ctx, r, spec.ID, state); err != nil {
			b.Fatal(err)
		}
		p1 := time.Now()
		if err := baselineResume(ctx, r, spec.ID, h, state); err != nil {
			b.Fatal(err)
		}
		p2 := time.Now()
		checkFill(b, h, 100+i)
		row.basePause, row.baseResume = append(row.basePause, p1.Sub(p0)), append(row.baseResume, p2.Sub(p1))
		if fi, err := os.Stat(state); err == nil {
			row.stateBytes = fi.Size()
		}
	}
	return row
}

// mountFill mounts a tmpfs with room for mib MiB on /tmp/fill in h's
// guest, and writes the 4 MiB seed fillGuest repeats.
func mountFill(tb testing.TB, h *runtime.Handle, mib int) {
	tb.Helper()
	// Random 4 MiB repeated: every page non-zero (the migration stream
	// skips zero pages), and cat is far faster than yes|head under TCG.
	mount := fmt.Sprintf("mkdir -p /tmp/fill && mount -t tmpfs -o size=%dm tmpfs /tmp/fill && "+
		"head -c 4194304 /dev/urandom > /tmp/seed && echo ok", mib+16)
	if out, err := run(h, "root", time.Minute, "sh", "-c", mount); err != nil || !strings.Contains(out, "ok") {
		tb.Fatalf("mount tmpfs: %q %v", out, err)
	}
}

// fillGuest (re)writes mib MiB of guest memory: /tmp/fill/data on the
// tmpfs of mountFill.
func fillGuest(tb testing.TB, h *runtime.Handle, mib int) {
	tb.Helper()
	fill := fmt.Sprintf("i=0; while [ $i -lt %d ]; do cat /tmp/seed; i=$((i+1)); done > /tmp/fill/data && echo filled", mib/4)
	if out, err := run(h, "root", 10*time.Minute, "sh", "-c", fill); err != nil || !strings.Contains(out, "filled") {
		tb.Fatalf("fill %d MiB: %q %v", mib, out, err)
	}
}

// checkFill proves that the guest's memory came back: the tmpfs file and
// the round marker are there. TestPauseResumeFilledMemory makes the same
// checks in an ordinary test.
func checkFill(tb testing.TB, h *runtime.Handle, round int) {
	tb.Helper()
	out, err := run(h, "root", time.Minute, "sh", "-c", "cat /tmp/fill/round; ls -l /tmp/fill/data")
	if err != nil || !strings.HasPrefix(out, strconv.Itoa(round)+"\n") {
		tb.Fatalf("after resume: %q %v", out, err)
	}
}

// baselinePause is the plain migrate-to-file pause: all guest RAM through
// the migration stream into path, fsync, QEMU exits. The network stays.
func baselinePause(ctx context.Context, r *Runtime, id, path string) error {
	bx, err := r.lockBox(id, "baseline pause")
	if err != nil {
		return err
	}
	defer bx.mu.Unlock()
	c, err := r.client(ctx, id, bx)
	if err != nil {
		return err
	}
	if err := qemu.MigrateTo(ctx, c, path, false); err != nil {
		return err
	}
	if err := memfile.SyncFiles(path); err != nil {
		return err
	}
	err = bx.proc.Stop(ctx, c)
	c.Close()
	bx.proc, bx.qmp = nil, nil
	return err
}

// baselineResume starts QEMU again in the sandbox's network namespace (its
// tap persists) with private RAM and loads all of it from path.
func baselineResume(ctx context.Context, r *Runtime, id string, h *runtime.Handle, path string) error {
	bx, err := r.lockBox(id, "baseline resume")
	if err != nil {
		return err
	}
	defer bx.mu.Unlock()
	meta, err := snapshot.ReadMeta(r.sandboxDir(id))
	if err != nil {
		return err
	}
	n, ok := r.net.Lookup(id)
	if !ok {
		return fmt.Errorf("no network for %s", id)
	}
	m, err := launch.RestoreMachine(id, r.sandboxDir(id), meta, r.tscKHz)
	if err != nil {
		return err
	}
	m.MemShared = false
	ids, err := launch.DirIDs(r.ids, r.sandboxDir(id))
	if err != nil {
		return err
	}
	jc, err := r.launcher.PrepareJail(n, m, ids)
	if err != nil {
		return err
	}
	p, err := qemu.Start(r.o.qemu, n.NSPath, filepath.Join(r.sandboxDir(id), "qemu.log"), m, jc)
	if err != nil {
		return err
	}
	if p.Con, err = qemu.DialConsole(ctx, m.Console, qemu.ConsoleLog(m), p.Alive); err != nil {
		_ = p.Stop(ctx, nil)
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := qemu.DialQMP(dctx, m.QMP)
	cancel()
	if err != nil {
		_ = p.Stop(ctx, nil)
		return err
	}
	bx.proc, bx.qmp = p, c
	if err := qemu.MigrateFrom(ctx, c, path, false); err != nil {
		return err
	}
	if err := c.Execute(ctx, "cont", nil, nil); err != nil {
		return err
	}
	return guestenvd.WaitRestored(ctx, envdAddr(h), r.o.readyTimeout)
}

// hostDirtyMiB is /proc/meminfo's Dirty: memory waiting to be written
// back, host-wide (the benchmark's guest is the main writer).
func hostDirtyMiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Dirty:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	return -1
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianInt(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func printPauseTable(rows []pauseRow) {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	ratio := func(a, b time.Duration) string {
		if a <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(b)/float64(a))
	}
	fmt.Println("pause/resume medians (TCG guest; baseline = plain migrate-to-file, same guest, same run)")
	fmt.Printf("%-9s | %-21s | %-10s | %-9s | %-21s | %-10s | %-11s | %-21s | %-15s | %s\n", "touched", "moat hot pause/resume", "written",
		"dirty", "moat idle pause/resume", "written", "resume, no QEMU", "baseline pause/resume", "baseline/moat", "baseline file")
	for _, r := range rows {
		hp, hr, ip, ir := median(r.hotPause), median(r.hotResume), median(r.idlePause), median(r.idleResume)
		bp, br, cr := median(r.basePause), median(r.baseResume), median(r.coldResume)
		if r.mib == 0 {
			fmt.Printf("%-9s | %9s / %-9s | %10s | (fresh sandbox; its commands wrote a few bytes since its restore) | resume, no QEMU %s\n",
				"little", ms(hp), ms(hr), mib(medianInt(r.hotBytes)), ms(cr))
			continue
		}
		fmt.Printf("%-9s | %9s / %-9s | %10s | %5d MiB | %9s / %-9s | %10s | %11s | %9s / %-9s | %5s / %-7s | %d MiB\n",
			strconv.Itoa(r.mib)+" MiB", ms(hp), ms(hr), mib(medianInt(r.hotBytes)), medianInt(r.hotDirty), ms(ip), ms(ir),
			mib(medianInt(r.idleBytes)), ms(cr), ms(bp), ms(br), ratio(hp, bp), ratio(hr, br), r.stateBytes>>20)
	}
	fmt.Println("(moat pause/resume: the stopped QEMU is kept and continued; resume, no QEMU: the same sandbox resumed")
	fmt.Println(" in a new QEMU after its kept one was let go, as after keepFor or a restart; written: memory pages")
	fmt.Println(" dirty at the pause's sync plus the state file, by cachestat(2); dirty: host memory waiting for")
	fmt.Println(" writeback before a hot pause; baseline/moat compares hot pause and resume with the baseline: >1")
	fmt.Println(" means Moat is faster)")
}
