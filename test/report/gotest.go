package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// maxLines bounds the output kept per test; a failure prints its tail.
const maxLines = 300

// readGo counts the tests of a `go test -json` stream and prints, as it
// goes, one line per package and the output of each failed test or
// package (its build errors, a panic in TestMain).
func readGo(r io.Reader, w io.Writer) (counts, error) {
	var c counts
	out := map[string][]string{} // package + "\x00" + test → output lines
	testsFailed := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// go test prints build failures of packages without tests as text.
			fmt.Fprintln(w, string(line))
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output":
			l := out[key]
			if len(l) == maxLines {
				l = l[1:]
			}
			out[key] = append(l, e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				countPackage(&c, e, out[key], testsFailed[e.Package], w)
			} else {
				countTest(&c, e, out[key], w)
				testsFailed[e.Package] = testsFailed[e.Package] || e.Action == "fail"
			}
			delete(out, key)
		}
	}
	return c, sc.Err()
}

// countPackage prints a package's result; a package that fails without a
// failed test (a build error, a panic outside tests, a timeout) counts as
// one failure of its own.
func countPackage(c *counts, e event, lines []string, testFailed bool, w io.Writer) {
	pkg := strings.TrimPrefix(e.Package, "github.com/moatsh/moat/")
	switch e.Action {
	case "fail":
		fmt.Fprintf(w, "FAIL\t%s\t%.1fs\n", pkg, e.Elapsed)
		for _, l := range lines {
			fmt.Fprint(w, l)
		}
		if !testFailed {
			c.failed++
			c.run++
			c.failures = append(c.failures, pkg+" (package: build failure or panic outside a test)")
		}
	case "pass":
		fmt.Fprintf(w, "ok\t%s\t%.1fs\n", pkg, e.Elapsed)
	}
	if e.Elapsed > 0 {
		c.times = append(c.times, timing{pkg, e.Elapsed})
	}
}

func countTest(c *counts, e event, lines []string, w io.Writer) {
	pkg := strings.TrimPrefix(e.Package, "github.com/moatsh/moat/")
	name := "go:" + pkg + "." + e.Test
	c.run++
	switch e.Action {
	case "pass":
		c.passed++
	case "fail":
		c.failed++
		c.failures = append(c.failures, name)
		fmt.Fprintf(w, "--- FAIL: %s (%.2fs)\n", name, e.Elapsed)
		for _, l := range lines {
			fmt.Fprint(w, l)
		}
	case "skip":
		c.skipped++
		c.skips = append(c.skips, skip{name, skipReason(lines)})
	}
}

// skipReason is the message a skipped test logged last before its
// "--- SKIP" line (go test streams t.Skip's message before the result).
func skipReason(lines []string) string {
	s := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		s = l
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
