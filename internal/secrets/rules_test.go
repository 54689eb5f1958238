package secrets

import (
	"errors"
	"strings"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
)

func headerRule(h map[string]string) []map[string]string {
	return []map[string]string{h}
}

func TestParseRules(t *testing.T) {
	tests := []struct {
		name  string
		in    map[string][]map[string]string
		names []string
		err   string
	}{
		{"one secret", map[string][]map[string]string{
			"api.example.com": headerRule(map[string]string{"Authorization": "Bearer ${e2b.secrets.OpenAI}"})},
			[]string{"openai"}, ""},
		{"wildcard, two secrets, literal header", map[string][]map[string]string{
			"*.Example.com": headerRule(map[string]string{"X-A": "${e2b.secrets.a}:${e2b.secrets.b}", "X-Plain": "x ${notours}"}),
			"other.org":     {{}}},
			[]string{"a", "b"}, ""},
		{"empty rule list", map[string][]map[string]string{"a.b": nil}, []string{}, ""},
		{"bad domain", map[string][]map[string]string{"exa mple.com": nil}, nil, "invalid domain"},
		{"inner wildcard", map[string][]map[string]string{"a.*.com": nil}, nil, "invalid domain"},
		{"bare wildcard", map[string][]map[string]string{"*": nil}, nil, "invalid domain"},
		{"url", map[string][]map[string]string{"https://a.com/": nil}, nil, "invalid domain"},
		{"bad header name", map[string][]map[string]string{"a.com": headerRule(map[string]string{"X A": "v"})}, nil,
			"invalid header name"},
		{"host header", map[string][]map[string]string{"a.com": headerRule(map[string]string{"host": "v"})}, nil,
			"cannot be set"},
		{"CRLF", map[string][]map[string]string{"a.com": headerRule(map[string]string{"X": "a\r\nB: c"})}, nil,
			"CR, LF"},
		{"bad secret name", map[string][]map[string]string{"a.com": headerRule(map[string]string{"X": "${e2b.secrets.a b}"})},
			nil, "invalid secret name"},
		{"identity token", map[string][]map[string]string{
			"a.com": headerRule(map[string]string{"X": "${e2b.identity.tokens.aws}"})}, nil, "not supported"},
		{"unknown placeholder", map[string][]map[string]string{
			"a.com": headerRule(map[string]string{"X": "${e2b.env.HOME}"})}, nil, "unknown placeholder"},
		{"unterminated", map[string][]map[string]string{
			"a.com": headerRule(map[string]string{"X": "${e2b.secrets.a} ${e2b.secrets.b"})}, nil, "unterminated"},
		{"domain twice", map[string][]map[string]string{"a.com": nil, "A.com": nil}, nil, "are the same"},
		{"header twice", map[string][]map[string]string{
			"a.com": headerRule(map[string]string{"x-a": "1", "X-A": "2"})}, nil, "twice"},
		{"oversize value", map[string][]map[string]string{
			"a.com": headerRule(map[string]string{"X": strings.Repeat("v", MaxHeaderValueSize+1)})}, nil, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, names, err := ParseRules(tt.in)
			if tt.err != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(names, ",") != strings.Join(tt.names, ",") {
				t.Fatalf("names = %v, want %v", names, tt.names)
			}
			for _, r := range rules {
				if r.Domain != strings.ToLower(r.Domain) {
					t.Fatalf("domain not canonical: %s", r.Domain)
				}
			}
		})
	}
}

func TestCheckReachable(t *testing.T) {
	allow := []string{"api.example.com", "*.svc.example.org", "*.deep.a.example.net"}
	for domain, want := range map[string]bool{
		"api.example.com":         true,
		"other.example.com":       false,
		"example.com":             false,
		"x.svc.example.org":       true,
		"x.y.svc.example.org":     true,
		"svc.example.org":         false, // *. never matches its apex
		"*.example.com":           true,  // api.example.com is below it
		"*.api.example.com":       false, // nothing allowed below api.example.com
		"*.svc.example.org":       true,
		"*.x.svc.example.org":     true,
		"*.example.org":           true, // overlaps *.svc.example.org
		"*.a.example.net":         true,
		"*.other.example.net":     false,
		"*.com":                   true,
		"*.net.example":           false,
		"api.example.com.evil.io": false,
	} {
		err := CheckReachable([]Rule{{Domain: domain}}, allow)
		if got := err == nil; got != want {
			t.Errorf("%s: reachable = %v (%v), want %v", domain, got, err, want)
		}
		if err != nil && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), domain)) {
			t.Errorf("%s: error %v does not name it as invalid argument", domain, err)
		}
	}
	if err := CheckReachable([]Rule{{Domain: "a.com"}}, nil); err == nil {
		t.Fatal("rules without allowOut domains accepted")
	}
}
