package main

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
)

var (
	tapSubtest  = regexp.MustCompile(`^(\s*)# Subtest: (.*)$`)
	tapResult   = regexp.MustCompile(`^(\s*)(not ok|ok) \d+ - (.*?)(?: # (SKIP|TODO)\b ?(.*))?$`)
	tapTotal    = regexp.MustCompile(`^# (tests|pass|fail|skipped|cancelled) (\d+)$`)
	tapDuration = regexp.MustCompile(`^# duration_ms ([0-9.]+)$`)
	tapTopTime  = regexp.MustCompile(`^  duration_ms: ([0-9.]+)$`) // a top-level test's or suite's
)

// readTAP counts the tests of one suite file's node --test TAP output
// into c: the run's own totals at the end, each skip with the path of
// suites and tests that leads to it ("e2e PHASE suite > describe > test"),
// and the file's duration.
func readTAP(c *counts, r io.Reader, phase, suite string) error {
	var stack []string        // names of the open subtests, by depth
	var totals [5]int         // tests, pass, fail, skipped, cancelled
	var secs, topSecs float64 // the run's duration; the sum of its top-level tests'
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := tapSubtest.FindStringSubmatch(line); m != nil {
			d := len(m[1]) / 4
			stack = append(stack[:min(d, len(stack))], m[2])
			continue
		}
		if m := tapResult.FindStringSubmatch(line); m != nil {
			d := len(m[1]) / 4
			path := append([]string{suite}, stack[:min(d, len(stack))]...)
			name := "e2e " + phase + " " + strings.Join(append(path, m[3]), " > ")
			if m[4] == "SKIP" {
				c.skips = append(c.skips, skip{name, m[5]})
			}
			if m[2] == "not ok" && !strings.Contains(line, "# SKIP") {
				c.failures = append(c.failures, name)
			}
			continue
		}
		if m := tapDuration.FindStringSubmatch(line); m != nil {
			ms, _ := strconv.ParseFloat(m[1], 64)
			secs = ms / 1000
			continue
		}
		if m := tapTopTime.FindStringSubmatch(line); m != nil {
			ms, _ := strconv.ParseFloat(m[1], 64)
			topSecs += ms / 1000
			continue
		}
		if m := tapTotal.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[2])
			totals[strings.Index("tests pass fail skipped cancelled", m[1])/5] = n
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if secs == 0 { // node 20's TAP reporter may end before "# duration_ms"
		secs = topSecs
	}
	c.times = append(c.times, timing{suite, secs})
	if totals[0] == 0 {
		// node died before its totals (a crash, the runner's own timeout).
		c.run++
		c.failed++
		c.failures = append(c.failures, "e2e "+phase+" "+suite+" (no TAP totals: the runner did not finish)")
		return nil
	}
	c.run += totals[0]
	c.passed += totals[1]
	// A cancelled test (a suite's timeout, a file that crashed) failed.
	c.failed += totals[2] + totals[4]
	c.skipped += totals[3]
	return nil
}
