package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tapSample = `TAP version 13
# Subtest: suite
    # Subtest: one
    ok 1 - one
    # Subtest: two
    ok 2 - two # SKIP microVM only
    # Subtest: three
    not ok 3 - three
    1..3
not ok 1 - suite
# Subtest: top
ok 2 - top # SKIP
1..2
# tests 4
# suites 1
# pass 1
# fail 1
# cancelled 1
# skipped 2
# todo 0
# duration_ms 1500.5
`

func TestReadTAP(t *testing.T) {
	var c counts
	if err := readTAP(&c, strings.NewReader(tapSample), "vm", "fork"); err != nil {
		t.Fatal(err)
	}
	if c.run != 4 || c.passed != 1 || c.failed != 2 || c.skipped != 2 {
		t.Errorf("counts %d/%d/%d/%d, want 4 run, 1 passed, 2 failed (one cancelled), 2 skipped", c.run, c.passed, c.failed, c.skipped)
	}
	want := []skip{{"e2e vm fork > suite > two", "microVM only"}, {"e2e vm fork > top", ""}}
	if len(c.skips) != 2 || c.skips[0] != want[0] || c.skips[1] != want[1] {
		t.Errorf("skips %q, want %q", c.skips, want)
	}
	if len(c.times) != 1 || c.times[0].secs != 1.5005 {
		t.Errorf("times %v", c.times)
	}
	// node 20's TAP reporter may stop before "# duration_ms": the top-level
	// tests' durations add up instead.
	var e counts
	cut := strings.Replace(tapSample, "# duration_ms 1500.5\n", "", 1)
	cut = strings.Replace(cut, "ok 2 - top # SKIP\n", "ok 2 - top # SKIP\n  ---\n  duration_ms: 250\n  ...\n", 1)
	if err := readTAP(&e, strings.NewReader(cut), "vm", "fork"); err != nil || e.run != 4 || len(e.times) != 1 || e.times[0].secs != 0.25 {
		t.Errorf("TAP without its duration: err %v, run %d, times %v, want 4 run in 0.25 s", err, e.run, e.times)
	}
	// A file without totals (node died) is one failure.
	var d counts
	if err := readTAP(&d, strings.NewReader("TAP version 13\n# Subtest: x\n"), "vm", "pause"); err != nil || d.failed != 1 {
		t.Errorf("truncated TAP: err %v, failed %d, want one failure", err, d.failed)
	}
}

const goSample = `{"Action":"run","Package":"github.com/moatsh/moat/internal/a","Test":"TestOK"}
{"Action":"pass","Package":"github.com/moatsh/moat/internal/a","Test":"TestOK","Elapsed":0.1}
{"Action":"run","Package":"github.com/moatsh/moat/internal/a","Test":"TestSkip"}
{"Action":"output","Package":"github.com/moatsh/moat/internal/a","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"github.com/moatsh/moat/internal/a","Test":"TestSkip","Output":"    a_test.go:9: missing prerequisite: needs root\n"}
{"Action":"output","Package":"github.com/moatsh/moat/internal/a","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"github.com/moatsh/moat/internal/a","Test":"TestSkip"}
{"Action":"output","Package":"github.com/moatsh/moat/internal/a","Test":"TestBad","Output":"    a_test.go:12: boom\n"}
{"Action":"fail","Package":"github.com/moatsh/moat/internal/a","Test":"TestBad"}
{"Action":"output","Package":"github.com/moatsh/moat/internal/a","Output":"--- FAIL: TestBad\n"}
{"Action":"fail","Package":"github.com/moatsh/moat/internal/a","Elapsed":2}
# github.com/moatsh/moat/internal/b
{"Action":"output","Package":"github.com/moatsh/moat/internal/b","Output":"b.go:1: syntax error\n"}
{"Action":"fail","Package":"github.com/moatsh/moat/internal/b","Elapsed":0}
`

func TestReadGo(t *testing.T) {
	var out bytes.Buffer
	c, err := readGo(strings.NewReader(goSample), &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.run != 4 || c.passed != 1 || c.failed != 2 || c.skipped != 1 {
		t.Errorf("counts %d/%d/%d/%d, want 4 run (one a package that does not build), 1 passed, 2 failed, 1 skipped", c.run, c.passed, c.failed, c.skipped)
	}
	if len(c.skips) != 1 || c.skips[0] != (skip{"go:internal/a.TestSkip", "a_test.go:9: missing prerequisite: needs root"}) {
		t.Errorf("skips %q", c.skips)
	}
	for _, want := range []string{"boom", "syntax error", "# github.com/moatsh/moat/internal/b"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFinish(t *testing.T) {
	dir := t.TempDir()
	skips := filepath.Join(dir, "skips.txt")
	if err := os.WriteFile(skips, []byte("# comment\ne2e vm fork > .*\tmicroVM only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MOAT_TEST_SKIPS", skips)
	t.Setenv("MOAT_TEST_SUMMARY", filepath.Join(dir, "sum.tsv"))
	for _, tt := range []struct {
		name    string
		require string
		c       counts
		wantErr string
	}{
		{"listed skip", "1", counts{run: 2, passed: 1, skipped: 1, skips: []skip{{"e2e vm fork > a", ""}}}, ""},
		{"unlisted skip required", "1", counts{run: 1, skipped: 1, skips: []skip{{"go:x.TestY", "needs root"}}}, "not listed"},
		{"unlisted skip on a laptop", "", counts{run: 1, skipped: 1, skips: []skip{{"go:x.TestY", "needs root"}}}, ""},
		{"failure", "1", counts{run: 1, failed: 1}, "1 failed"},
		{"nothing ran", "1", counts{}, "no test ran"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MOAT_TEST_REQUIRE", tt.require)
			var out bytes.Buffer
			err := finish("p", tt.c, &out)
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
	var out bytes.Buffer
	if err := summary(filepath.Join(dir, "sum.tsv"), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), "total: 1 passed, 1 failed, 3 skipped\n") {
		t.Errorf("summary:\n%s", out.String())
	}
}

func TestLoadSkipsRejectsBadLines(t *testing.T) {
	for _, line := range []string{"no tab here", "pattern\t ", "(\treason"} {
		p := filepath.Join(t.TempDir(), "s")
		if err := os.WriteFile(p, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadSkips(p); err == nil {
			t.Errorf("%q: no error", line)
		}
	}
}
