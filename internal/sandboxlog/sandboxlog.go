// Package sandboxlog reads a sandbox's own log (envd's output; a
// microVM's serial console, which carries envd's output after the
// guest's boot) into E2B's log entries for GET /sandboxes/{id}/logs. envd
// logs in log/slog's text format, whose lines become structured entries
// (time, level, message, fields); any other line (a guest kernel's, a
// program's) is kept whole as an info message, dated by the entry before
// it (or the sandbox's start).
package sandboxlog

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logfmt/logfmt"
)

// Entry is one line of a sandbox's log.
type Entry struct {
	Time    time.Time
	Level   string // debug, info, warn or error
	Message string
	Fields  map[string]string
	Line    string // as written
}

// MaxRead bounds how much of each log file is read (its newest part).
const MaxRead = 2 << 20

// maxLine bounds one line; a longer one is cut.
const maxLine = 64 << 10

// Read reads files (oldest first; missing ones are skipped) into entries.
// An undated line takes the time of the entry before it; those before the
// first dated one take its time (a guest's boot, before envd's first
// line), or start when none is dated.
func Read(files []string, start time.Time) ([]Entry, error) {
	var out []Entry
	var last time.Time
	for _, f := range files {
		es, err := readFile(f, last)
		if err != nil {
			return nil, err
		}
		if len(es) > 0 {
			last = es[len(es)-1].Time
		}
		out = append(out, es...)
	}
	first := start
	for _, e := range out {
		if !e.Time.IsZero() {
			first = e.Time
			break
		}
	}
	for i := range out {
		if !out[i].Time.IsZero() {
			break
		}
		out[i].Time = first
	}
	return out, nil
}

func readFile(path string, last time.Time) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	skip := false
	if fi, err := f.Stat(); err == nil && fi.Size() > MaxRead {
		if _, err := f.Seek(fi.Size()-MaxRead, io.SeekStart); err != nil {
			return nil, err
		}
		skip = true // the first line is a part
	}
	return Parse(f, last, skip), nil
}

// Parse reads lines from r; undated lines take the time of the entry
// before them (last for the first ones). skipFirst drops the first line
// (a part of one, after a seek).
func Parse(r io.Reader, last time.Time, skipFirst bool) []Entry {
	var out []Entry
	br := bufio.NewReaderSize(r, 64<<10)
	for first := true; ; first = false {
		line, err := readLine(br)
		if len(line) > 0 && !(first && skipFirst) {
			e := ParseLine(string(line))
			if e.Time.IsZero() {
				e.Time = last
			}
			last = e.Time
			out = append(out, e)
		}
		if err != nil {
			return out
		}
	}
}

// readLine reads one line without its end (\n, \r\n), cut at maxLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(line) < maxLine {
			line = append(line, part[:min(len(part), maxLine-len(line))]...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

// ParseLine makes an entry of one line: a log/slog text line with a time
// and a message is structured; anything else is an info message with no
// time.
func ParseLine(line string) Entry {
	e := Entry{Level: "info", Message: line, Line: line}
	d := logfmt.NewDecoder(strings.NewReader(line))
	if !d.ScanRecord() {
		return e
	}
	var (
		t      time.Time
		msg    string
		hasMsg bool
		level  = "info"
		fields = map[string]string{}
	)
	for d.ScanKeyval() {
		k, v := string(d.Key()), string(d.Value())
		switch k {
		case "time":
			pt, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return e
			}
			t = pt
		case "level":
			level = Level(v)
		case "msg":
			msg, hasMsg = v, true
		default:
			if len(fields) < 64 {
				fields[k] = v
			}
		}
	}
	if d.Err() != nil || d.ScanRecord() || t.IsZero() || !hasMsg {
		return e
	}
	return Entry{Time: t, Level: level, Message: msg, Fields: fields, Line: line}
}

// Level maps a log/slog level ("INFO", "WARN+2", "debug") to E2B's:
// debug, info, warn or error.
func Level(s string) string {
	s = strings.ToLower(s)
	for _, l := range []string{"debug", "info", "warn", "error"} {
		if strings.HasPrefix(s, l) {
			return l
		}
	}
	return "info"
}

// rank orders E2B's levels.
func rank(level string) int {
	switch level {
	case "debug":
		return 0
	case "warn":
		return 2
	case "error":
		return 3
	}
	return 1
}

// ValidLevel reports whether s is one of E2B's levels.
func ValidLevel(s string) bool {
	switch s {
	case "debug", "info", "warn", "error":
		return true
	}
	return false
}

// Query selects entries (E2B's v2 logs parameters).
type Query struct {
	// Cursor: forward, entries at or after it; backward, at or before it
	// (zero: all).
	Cursor   time.Time
	Backward bool // newest first
	MinLevel string
	Search   string // a substring of the message, case-sensitive
	Limit    int    // at most this many (0: none)
}

// Select returns the entries of es (oldest first) that q asks for, in its
// direction.
func Select(es []Entry, q Query) []Entry {
	out := []Entry{}
	min := rank(q.MinLevel)
	keep := func(e Entry) bool {
		if q.MinLevel != "" && rank(e.Level) < min {
			return false
		}
		if q.Search != "" && !strings.Contains(e.Message, q.Search) {
			return false
		}
		if q.Cursor.IsZero() {
			return true
		}
		if q.Backward {
			return !e.Time.After(q.Cursor)
		}
		return !e.Time.Before(q.Cursor)
	}
	for i := range es {
		e := es[i]
		if q.Backward {
			e = es[len(es)-1-i]
		}
		if keep(e) {
			if q.Limit > 0 && len(out) == q.Limit {
				break
			}
			out = append(out, e)
		}
	}
	return out
}
