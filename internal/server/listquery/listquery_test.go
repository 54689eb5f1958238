package listquery

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/moatsh/moat/internal/store"
)

func TestParseMetadataFilter(t *testing.T) {
	tests := []struct {
		raw  string
		want map[string]string
		ok   bool
	}{
		{"", nil, true},
		{"a=b", map[string]string{"a": "b"}, true},
		{"a%3Db", map[string]string{"a": "b"}, true},
		{"a%2520b=c%2526d", map[string]string{"a b": "c&d"}, true},
		{"k1=v1&k2=v2", map[string]string{"k1": "v1", "k2": "v2"}, true},
		{"a", nil, false},
		{"a=b=c", nil, false},
		{"=v", nil, false},
		{"%zz", nil, false},
	}
	for _, tt := range tests {
		got, err := ParseMetadataFilter(tt.raw)
		if (err == nil) != tt.ok || len(got) != len(tt.want) {
			t.Errorf("%q: %v, %v", tt.raw, got, err)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("%q: %v", tt.raw, got)
			}
		}
	}
}

// FuzzParseMetadataFilter checks that the parser never panics and that what
// the SDKs send (encode each part, join, encode the whole) round-trips.
func FuzzParseMetadataFilter(f *testing.F) {
	for _, s := range []string{"a", "a b", "c&d", "=", "%", "ü", "+"} {
		f.Add(s, s+"v")
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		_, _ = ParseMetadataFilter(k + "=" + v)
		if k == "" {
			return
		}
		sdk := url.QueryEscape(strings.ReplaceAll(url.QueryEscape(k), "+", "%20") + "=" +
			strings.ReplaceAll(url.QueryEscape(v), "+", "%20"))
		got, err := ParseMetadataFilter(sdk)
		if err != nil {
			t.Fatalf("encoded %q=%q: %v", k, v, err)
		}
		if got[k] != v || len(got) != 1 {
			t.Fatalf("round trip %q=%q → %v", k, v, got)
		}
	})
}

// TestTokenRoundTrip checks that a page token continues only a listing of
// the order it was made for.
func TestTokenRoundTrip(t *testing.T) {
	c := store.Cursor{StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ID: "abc123"}
	for _, tc := range []struct {
		name, made, used string
		ok               bool
	}{
		{"desc", "desc", "desc", true},
		{"asc", "asc", "asc", true},
		{"desc token, asc listing", "desc", "asc", false},
		{"asc token, desc listing", "asc", "desc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := url.Values{"order": {tc.used}, "nextToken": {EncodeToken(c, tc.made)}}
			f, err := Parse(q)
			if (err == nil) != tc.ok {
				t.Fatalf("Parse = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (f.Cursor == nil || !f.Cursor.StartedAt.Equal(c.StartedAt) || f.Cursor.ID != c.ID) {
				t.Fatalf("cursor = %+v, want %+v", f.Cursor, c)
			}
		})
	}
}
