package server

import (
	"bufio"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/server/volumeapi"
)

// notServed are the operations of api/rest/openapi.yml (E2B's contract)
// this server does not route, and why: a 404 for them is the truth, not a
// forgotten route. (Operations Moat does not implement have routes that
// answer 501.)
var notServed = map[string]string{}

// openapiOps lists "METHOD /path" for every operation of the document.
func openapiOps(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pathRE := regexp.MustCompile(`^  (/\S*):\s*$`)
	opRE := regexp.MustCompile(`^    (get|put|post|patch|delete|head):\s*$`)
	var ops []string
	inPaths, cur := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			inPaths = true
		case inPaths && len(line) > 0 && line[0] != ' ' && line[0] != '#':
			inPaths = false
		case inPaths && pathRE.MatchString(line):
			cur = pathRE.FindStringSubmatch(line)[1]
		case inPaths && cur != "" && opRE.MatchString(line):
			ops = append(ops, strings.ToUpper(opRE.FindStringSubmatch(line)[1])+" "+cur)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ops
}

// TestOpenAPIOperationsRouted: every operation of the OpenAPI document is
// routed (served, or answered 501 by a route of its own), except the ones
// notServed lists; and every one listed there is really unrouted.
func TestOpenAPIOperationsRouted(t *testing.T) {
	s := New(Config{})
	ops := openapiOps(t, "../../api/rest/openapi.yml")
	if len(ops) < 50 {
		t.Fatalf("read %d operations: the parser lost its way", len(ops))
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		req := httptest.NewRequest(method, param.ReplaceAllString(path, "x1"), nil)
		_, pattern := s.mux.Handler(req)
		if strings.HasPrefix(req.URL.Path, volumeapi.ContentPrefix) {
			pattern = "ServeHTTP: " + volumeapi.ContentPrefix // streamed before the mux (volumeapi)
		}
		why, listed := notServed[op]
		switch {
		case pattern == "" && !listed:
			t.Errorf("%s: no route", op)
		case pattern != "" && listed:
			t.Errorf("%s: routed (%s) but listed as not served (%s)", op, pattern, why)
		}
	}
}
