package inject

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestRulesMatch(t *testing.T) {
	r := Compile([]Rule{
		{Domain: "api.example.com", Headers: map[string]string{"X-Rule": "exact"}},
		{Domain: "*.example.com", Headers: map[string]string{"x-rule": "wild", "X-Only-Wild": "1"}},
		{Domain: "*.b.example.com", Headers: map[string]string{"X-Rule": "long"}},
		{Domain: "*.example.com", Headers: map[string]string{"X-Second": "2"}}, // same domain: merged, in order
		{Domain: "quiet.example.org"}, // no headers: no rule
		{Domain: "Mixed.Example.NET.", Headers: map[string]string{"X-Rule": "case"}},
	})
	tests := []struct {
		name string
		want string // X-Rule, "" = no rule
	}{
		{"api.example.com", "exact"},
		{"API.Example.com.", "exact"},
		{"x.api.example.com", "wild"}, // below the exact name: the wildcard applies
		{"c.example.com", "wild"},
		{"a.b.example.com", "long"},
		{"x.y.b.example.com", "long"},
		{"b.example.com", "wild"}, // *.b.example.com never matches its apex
		{"example.com", ""},
		{"evilexample.com", ""},
		{"example.com.evil", ""},
		{"quiet.example.org", ""},
		{"mixed.example.net", "case"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := r.Match(tt.name)
			if got := h["X-Rule"]; got != tt.want || ok != (tt.want != "") {
				t.Fatalf("Match(%q) = %q, %v; want %q", tt.name, got, ok, tt.want)
			}
		})
	}
	if h, _ := r.Match("c.example.com"); h["X-Second"] != "2" || h["X-Only-Wild"] != "1" {
		t.Fatalf("rules of one domain not merged: %v", h)
	}
	if !(Rules{}).Empty() || Compile([]Rule{{Domain: "a.com"}}).Empty() == false || r.Empty() {
		t.Fatal("Empty")
	}
}

func TestFill(t *testing.T) {
	secrets := map[string]string{"k": "VALUE", "other-1": "O"}
	value := func(n string) (string, error) {
		if v, ok := secrets[n]; ok {
			return v, nil
		}
		return "", &MissingSecretError{Name: n}
	}
	tests := []struct{ in, want, err string }{
		{"Bearer ${e2b.secrets.k}", "Bearer VALUE", ""},
		{"${e2b.secrets.K}:${e2b.secrets.other-1}", "VALUE:O", ""},
		{"plain ${notours} $ {e2b.secrets.k}", "plain ${notours} $ {e2b.secrets.k}", ""},
		{"${e2b.secrets.gone}", "", `secret "gone" not found`},
		{"${e2b.secrets.k", "", "malformed"},
		{"${e2b.secrets.}", "", "malformed"},
		{"${e2b.secrets.a b}", "", "malformed"},
	}
	for _, tt := range tests {
		got, err := Fill(tt.in, value)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || got != "" {
				t.Errorf("Fill(%q) = %q, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Fill(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	var missing *MissingSecretError
	if _, err := Fill("${e2b.secrets.gone}", value); !errors.As(err, &missing) || missing.Name != "gone" {
		t.Fatalf("missing secret error: %v", err)
	}
}

// placeholderRE is how the API (secrets.ParseRules) finds placeholders.
var placeholderRE = regexp.MustCompile(`\$\{e2b\.secrets\.([a-zA-Z0-9_-]{1,128})\}`)

// FuzzFill checks Fill against the regular expression the API validates
// with: whenever Fill succeeds it replaced exactly the placeholders the
// expression finds, and no placeholder prefix survives.
func FuzzFill(f *testing.F) {
	for _, s := range []string{"Bearer ${e2b.secrets.k}", "${e2b.secrets.a}${e2b.secrets.B}", "${e2b.secrets.", "x}${"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := Fill(v, func(n string) (string, error) { return "<" + strings.ToLower(n) + ">", nil })
		if err != nil {
			if !errors.Is(err, ErrPlaceholder) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		want := placeholderRE.ReplaceAllStringFunc(v, func(m string) string {
			return "<" + strings.ToLower(placeholderRE.FindStringSubmatch(m)[1]) + ">"
		})
		if got != want {
			t.Fatalf("Fill(%q) = %q, regexp gives %q", v, got, want)
		}
		if strings.Contains(got, placeholderPrefix) {
			t.Fatalf("Fill(%q) = %q keeps a placeholder", v, got)
		}
	})
}
