// Command report turns the raw output of scripts/test.sh's phases into the
// counts the script prints: for each phase, tests run, passed, failed and
// skipped, and each skip with its reason.
//
// It exists because a test run must never pass by skipping unseen: under
// MOAT_TEST_REQUIRE=1 every skip must match a line of test/skips.txt (a
// skip by design, with its reason), and any other skip fails the phase.
//
//	report go PHASE           < go test -json output
//	report tap PHASE SUITE.tap… (node --test's TAP output, a file per suite)
//	report summary              (the table of every phase so far)
//
// go and tap append one line per phase to $MOAT_TEST_SUMMARY (a TSV file);
// summary prints it and the closing line "N passed, N failed, N skipped".
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: report go PHASE | tap PHASE FILE… | summary")
	}
	switch {
	case args[0] == "go" && len(args) == 2:
		c, err := readGo(stdin, stdout)
		if err != nil {
			return err
		}
		return finish(args[1], c, stdout)
	case args[0] == "tap" && len(args) >= 3:
		var c counts
		for _, p := range args[2:] {
			if err := readTAPFile(&c, p, args[1]); err != nil {
				return err
			}
		}
		return finish(args[1], c, stdout)
	case args[0] == "summary" && len(args) == 1:
		return summary(os.Getenv("MOAT_TEST_SUMMARY"), stdout)
	}
	return fmt.Errorf("usage: report go PHASE | tap PHASE FILE… | summary")
}

// readTAPFile reads one suite's TAP file; the suite is its name less .tap.
func readTAPFile(c *counts, path, phase string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return readTAP(c, f, phase, strings.TrimSuffix(filepath.Base(path), ".tap"))
}

// counts is one phase's result.
type counts struct {
	run, passed, failed, skipped int
	skips                        []skip   // every skip, in order
	failures                     []string // names of failed tests and packages
	times                        []timing // the slowest units (packages, suite files)
}

type skip struct{ name, reason string }

type timing struct {
	name string
	secs float64
}

// finish prints the phase's counts and skips, checks the skips against the
// by-design list, and records the phase in $MOAT_TEST_SUMMARY.
func finish(phase string, c counts, w io.Writer) error {
	allowed, err := loadSkips(skipsFile())
	if err != nil {
		return err
	}
	require := os.Getenv("MOAT_TEST_REQUIRE") == "1"
	var unlisted []skip
	fmt.Fprintf(w, "==> %s: %d run, %d passed, %d failed, %d skipped\n", phase, c.run, c.passed, c.failed, c.skipped)
	for _, s := range c.skips {
		why := allowed.match(s.name)
		tag := "by design"
		if why == "" {
			tag = "NOT LISTED in test/skips.txt"
			unlisted = append(unlisted, s)
		}
		fmt.Fprintf(w, "    skipped (%s): %s: %s\n", tag, s.name, s.reason)
	}
	sort.Slice(c.times, func(i, j int) bool { return c.times[i].secs > c.times[j].secs })
	if len(c.times) > 0 {
		fmt.Fprintf(w, "    slowest:")
		for i, t := range c.times {
			if i == 8 {
				break
			}
			fmt.Fprintf(w, " %s %.0fs;", t.name, t.secs)
		}
		fmt.Fprintln(w)
	}
	for _, f := range c.failures {
		fmt.Fprintf(w, "    FAILED: %s\n", f)
	}
	if p := os.Getenv("MOAT_TEST_SUMMARY"); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, "%s\t%d\t%d\t%d\t%d\t%d\n", phase, c.run, c.passed, c.failed, c.skipped, len(unlisted))
		if err := f.Close(); err != nil {
			return err
		}
	}
	switch {
	case c.failed > 0:
		return fmt.Errorf("%s: %d failed", phase, c.failed)
	case c.run == 0:
		return fmt.Errorf("%s: no test ran", phase)
	case require && len(unlisted) > 0:
		return fmt.Errorf("%s: %d skips not listed in test/skips.txt (MOAT_TEST_REQUIRE=1: a skip that is not by design is a failure)", phase, len(unlisted))
	}
	return nil
}

// skipsFile is test/skips.txt beside this command's source, or $MOAT_TEST_SKIPS.
func skipsFile() string {
	if p := os.Getenv("MOAT_TEST_SKIPS"); p != "" {
		return p
	}
	return filepath.Join("test", "skips.txt")
}

type skipList []struct {
	re     *regexp.Regexp
	reason string
}

// loadSkips reads lines of "PATTERN<TAB>reason"; PATTERN is a regexp that
// must match a skipped test's whole name. # starts a comment line.
func loadSkips(path string) (skipList, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("skips by design: %w", err)
	}
	var l skipList
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pat, reason, ok := strings.Cut(line, "\t")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: want PATTERN<TAB>reason", path, i+1)
		}
		re, err := regexp.Compile("^(?:" + pat + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		l = append(l, struct {
			re     *regexp.Regexp
			reason string
		}{re, strings.TrimSpace(reason)})
	}
	return l, nil
}

func (l skipList) match(name string) string {
	for _, s := range l {
		if s.re.MatchString(name) {
			return s.reason
		}
	}
	return ""
}

// summary prints the phases recorded in path and the closing line.
func summary(path string, w io.Writer) error {
	if path == "" {
		return fmt.Errorf("MOAT_TEST_SUMMARY is not set")
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var tot [5]int
	fmt.Fprintf(w, "%-44s %6s %6s %6s %6s %9s\n", "phase", "run", "passed", "failed", "skipped", "unlisted")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), "\t")
		if len(fs) != 6 {
			continue
		}
		var n [5]int
		for i := range n {
			n[i], _ = strconv.Atoi(fs[i+1])
			tot[i] += n[i]
		}
		fmt.Fprintf(w, "%-44s %6d %6d %6d %6d %9d\n", fs[0], n[0], n[1], n[2], n[3], n[4])
	}
	fmt.Fprintf(w, "total: %d passed, %d failed, %d skipped\n", tot[1], tot[2], tot[3])
	return sc.Err()
}
