package eventapi

import (
	"net/url"
	"slices"
	"testing"

	"github.com/moatsh/moat/internal/errdefs"
	"github.com/moatsh/moat/internal/events"
)

func TestParseQuery(t *testing.T) {
	for _, tt := range []struct {
		q             string
		ok            bool
		offset, limit int
		asc           bool
		types         []string
	}{
		{"", true, 0, 10, false, nil},
		{"offset=5&limit=100&orderAsc=true", true, 5, 100, true, nil},
		{"limit=1&orderAsc=false", true, 0, 1, false, nil},
		{"types=sandbox.lifecycle.killed&types=sandbox.lifecycle.paused,sandbox.lifecycle.killed", true, 0, 10, false,
			[]string{events.Killed, events.Paused}},
		{"limit=0", false, 0, 0, false, nil},
		{"limit=101", false, 0, 0, false, nil},
		{"limit=1e2", false, 0, 0, false, nil},
		{"offset=-1", false, 0, 0, false, nil},
		{"offset=x", false, 0, 0, false, nil},
		{"orderAsc=yes", false, 0, 0, false, nil},
		{"types=", false, 0, 0, false, nil},
		{"types=created", false, 0, 0, false, nil},
	} {
		q, _ := url.ParseQuery(tt.q)
		f, err := ParseQuery(q)
		if (err == nil) != tt.ok {
			t.Errorf("%q: err %v, want ok %v", tt.q, err, tt.ok)
			continue
		}
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("%q: %v is not an invalid argument", tt.q, err)
			}
			continue
		}
		if f.Offset != tt.offset || f.Limit != tt.limit || f.Asc != tt.asc || !slices.Equal(f.Types, tt.types) {
			t.Errorf("%q: %+v", tt.q, f)
		}
	}
}

// FuzzParseQuery: any query is either refused as an invalid argument or
// gives a filter within E2B's bounds with known types only.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "limit=5", "offset=3&orderAsc=true", "types=sandbox.lifecycle.created", "limit=%zz", "types=,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		fl, err := ParseQuery(q)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("%q: %v", raw, err)
			}
			return
		}
		if fl.Limit < 1 || fl.Limit > MaxLimit || fl.Offset < 0 {
			t.Fatalf("%q: %+v", raw, fl)
		}
		for _, ty := range fl.Types {
			if !events.Valid(ty) {
				t.Fatalf("%q: type %q", raw, ty)
			}
		}
	})
}
