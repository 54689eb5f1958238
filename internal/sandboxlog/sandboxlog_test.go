package sandboxlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	at := time.Date(2026, 12, 7, 3, 20, 1, 500_000_000, time.UTC)
	for _, tc := range []struct {
		name, line string
		want       Entry
	}{
		{"envd", `time=2026-12-07T03:20:01.500Z level=INFO msg="process started" pid=12 cmd=/bin/bash pty=false`,
			Entry{Time: at, Level: "info", Message: "process started", Fields: map[string]string{"pid": "12", "cmd": "/bin/bash", "pty": "false"}}},
		{"quoted value with escapes", `time=2026-12-07T03:20:01.500Z level=WARN+2 msg=x err="a \"b\" c"`,
			Entry{Time: at, Level: "warn", Message: "x", Fields: map[string]string{"err": `a "b" c`}}},
		{"no level", `time=2026-12-07T03:20:01.500Z msg=hello`, Entry{Time: at, Level: "info", Message: "hello", Fields: map[string]string{}}},
		{"kernel line", `[    0.123456] Linux version 6.1`, Entry{Level: "info", Message: `[    0.123456] Linux version 6.1`}},
		{"no msg", `time=2026-12-07T03:20:01.500Z level=INFO`, Entry{Level: "info", Message: `time=2026-12-07T03:20:01.500Z level=INFO`}},
		{"bad time", `time=yesterday level=INFO msg=x`, Entry{Level: "info", Message: `time=yesterday level=INFO msg=x`}},
		{"unclosed quote", `time=2026-12-07T03:20:01.500Z msg="x`, Entry{Level: "info", Message: `time=2026-12-07T03:20:01.500Z msg="x`}},
		{"empty", ``, Entry{Level: "info"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseLine(tc.line)
			if !got.Time.Equal(tc.want.Time) || got.Level != tc.want.Level || got.Message != tc.want.Message ||
				len(got.Fields) != len(tc.want.Fields) || got.Line != tc.line {
				t.Fatalf("ParseLine(%q) = %+v, want %+v", tc.line, got, tc.want)
			}
			for k, v := range tc.want.Fields {
				if got.Fields[k] != v {
					t.Errorf("field %s = %q, want %q", k, got.Fields[k], v)
				}
			}
		})
	}
}

// TestRead: files in order, missing ones skipped, undated lines dated by
// the entry before them, the start before any; a long file is read from
// its newest part.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	old, cur := filepath.Join(dir, "console.log.1"), filepath.Join(dir, "console.log")
	os.WriteFile(old, []byte("[ 0.1] boot\r\ntime=2026-12-07T03:00:05Z level=INFO msg=ready\n"), 0o600)
	os.WriteFile(cur, []byte("plain output\ntime=2026-12-07T03:00:09Z level=ERROR msg=boom\nno newline"), 0o600)
	es, err := Read([]string{old, filepath.Join(dir, "missing"), cur}, start)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Time.Format("04:05")+" "+e.Level+" "+e.Message)
	}
	want := []string{"00:05 info [ 0.1] boot", "00:05 info ready", "00:05 info plain output", "00:09 error boom", "00:09 info no newline"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Read:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, []byte(strings.Repeat("x", MaxRead)+"\nlast\n"), 0o600)
	es, err = Read([]string{big}, start)
	if err != nil || len(es) != 1 || es[0].Message != "last" || !es[0].Time.Equal(start) {
		t.Fatalf("a big file: %d entries, %v", len(es), err)
	}
	os.WriteFile(big, []byte(strings.Repeat("y", 3*maxLine)+"\n"), 0o600)
	if es, _ = Read([]string{big}, start); len(es) != 1 || len(es[0].Message) != maxLine {
		t.Fatalf("a long line: %d entries", len(es))
	}
}

func TestSelect(t *testing.T) {
	base := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	var es []Entry
	for i, l := range []string{"debug", "info", "warn", "error", "info"} {
		es = append(es, Entry{Time: base.Add(time.Duration(i) * time.Second), Level: l, Message: l + " message"})
	}
	msgs := func(es []Entry) string {
		var s []string
		for _, e := range es {
			s = append(s, e.Time.Format("05")+e.Level)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name string
		q    Query
		want string
	}{
		{"all", Query{}, "00debug,01info,02warn,03error,04info"},
		{"from a cursor", Query{Cursor: base.Add(2 * time.Second)}, "02warn,03error,04info"},
		{"backward from a cursor", Query{Cursor: base.Add(2 * time.Second), Backward: true}, "02warn,01info,00debug"},
		{"backward, limit", Query{Backward: true, Limit: 2}, "04info,03error"},
		{"min level warn", Query{MinLevel: "warn"}, "02warn,03error"},
		{"search", Query{Search: "info"}, "01info,04info"},
		{"search is case-sensitive", Query{Search: "INFO"}, ""},
		{"limit", Query{Limit: 1}, "00debug"},
	} {
		if got := msgs(Select(es, tc.q)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add(`time=2026-12-07T03:20:01.500Z level=INFO msg="process started" pid=12`)
	f.Add(`[    0.123456] Linux version`)
	f.Add(`time= msg="\x00`)
	f.Fuzz(func(t *testing.T, line string) {
		e := ParseLine(line)
		if e.Line != line || !ValidLevel(e.Level) {
			t.Fatalf("ParseLine(%q) = %+v", line, e)
		}
		if e.Time.IsZero() && e.Message != line {
			t.Fatalf("an undated line's message changed: %q", e.Message)
		}
	})
}
