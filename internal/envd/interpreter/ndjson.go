package interpreter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/moatsh/moat/internal/jupyter"
)

// KeepaliveInterval is the idle time after which a keepalive line is sent.
var KeepaliveInterval = 5 * time.Second

// line is one NDJSON output object: a type plus its other keys.
type line struct {
	Type   string
	Fields map[string]any
}

var (
	keepaliveLine = []byte(`{"type": "keepalive"}`)
	endLine       = []byte(`{"type": "end_of_execution"}`)
)

// encode renders l as one line of ASCII-only JSON, "type" first.
func (l line) encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"type": `)
	t, _ := json.Marshal(l.Type)
	b.Write(t)
	keys := make([]string, 0, len(l.Fields))
	for k := range l.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := json.Marshal(l.Fields[k])
		if err != nil {
			return nil, fmt.Errorf("encode %s.%s: %w", l.Type, k, err)
		}
		kb, _ := json.Marshal(k)
		b.WriteString(", ")
		b.Write(kb)
		b.WriteString(": ")
		b.Write(v)
	}
	b.WriteByte('}')
	return asciiJSON(b.Bytes()), nil
}

// asciiJSON escapes every non-ASCII rune of valid JSON as \uXXXX (with
// surrogate pairs). Non-ASCII can only occur inside strings, so this is safe.
func asciiJSON(in []byte) []byte {
	ascii := true
	for _, c := range in {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return in
	}
	out := make([]byte, 0, len(in)+16)
	for len(in) > 0 {
		r, size := utf8.DecodeRune(in)
		in = in[size:]
		switch {
		case r < utf8.RuneSelf:
			out = append(out, byte(r))
		case r > 0xFFFF:
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
	}
	return out
}

// streamWriter writes NDJSON lines, flushing each one, and emits a
// keepalive line after KeepaliveInterval without output.
type streamWriter struct {
	mu    sync.Mutex
	w     io.Writer
	flush func()
	timer *time.Timer
	err   error
	done  bool
}

func newStreamWriter(w http.ResponseWriter) *streamWriter {
	sw := &streamWriter{w: w, flush: func() {}}
	if f, ok := w.(http.Flusher); ok {
		sw.flush = f.Flush
	}
	sw.flush() // send the headers now: the SDK's request timer runs until then
	sw.timer = time.AfterFunc(KeepaliveInterval, sw.keepalive)
	return sw
}

func (sw *streamWriter) keepalive() {
	sw.writeRaw(keepaliveLine)
}

// writeRaw writes one line (b must not contain a newline).
func (sw *streamWriter) writeRaw(b []byte) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.done || sw.err != nil {
		return
	}
	if _, err := sw.w.Write(append(b, '\n')); err != nil {
		sw.err = err
		return
	}
	sw.flush()
	sw.timer.Reset(KeepaliveInterval)
}

// emit encodes and writes l.
func (sw *streamWriter) emit(l line) {
	b, err := l.encode()
	if err != nil {
		b, _ = line{Type: "error", Fields: map[string]any{"name": "EncodingError", "value": err.Error(), "traceback": ""}}.encode()
	}
	sw.writeRaw(b)
}

// finish writes end_of_execution and stops the keepalive timer.
func (sw *streamWriter) finish() {
	sw.writeRaw(endLine)
	sw.mu.Lock()
	sw.done = true
	sw.timer.Stop()
	sw.mu.Unlock()
}

// mimeKeys maps Jupyter MIME types to result keys (reference §3.2).
var mimeKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// resultFields maps a display bundle to result line fields.
func resultFields(data map[string]json.RawMessage, main bool) map[string]any {
	f := map[string]any{"is_main_result": main}
	extra := map[string]any{}
	for mime, raw := range data {
		key, ok := mimeKeys[mime]
		if !ok {
			extra[mime] = raw
			continue
		}
		if key == "text" {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				f[key] = stripQuotes(s)
				continue
			}
		}
		f[key] = raw
	}
	f["extra"] = extra
	return f
}

// stripQuotes removes one pair of surrounding single or double quotes.
func stripQuotes(s string) string {
	if len(s) >= 2 && (s[0] == '\'' && s[len(s)-1] == '\'' || s[0] == '"' && s[len(s)-1] == '"') {
		return s[1 : len(s)-1]
	}
	return s
}

// translator turns the IOPub messages of one execution into lines.
type translator struct {
	emit      func(line)
	errorSent bool
}

func (t *translator) handle(m jupyter.Message) {
	switch m.Type() {
	case "stream":
		var c struct{ Name, Text string }
		if m.DecodeContent(&c) != nil || c.Text == "" {
			return
		}
		typ := "stdout"
		if c.Name == "stderr" {
			typ = "stderr"
		}
		t.emit(line{Type: typ, Fields: map[string]any{"text": c.Text, "timestamp": m.Header.Date}})
	case "execute_result", "display_data":
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if m.DecodeContent(&c) != nil || len(c.Data) == 0 {
			return
		}
		t.emit(line{Type: "result", Fields: resultFields(c.Data, m.Type() == "execute_result")})
	case "error":
		var c struct {
			EName     string   `json:"ename"`
			EValue    string   `json:"evalue"`
			Traceback []string `json:"traceback"`
		}
		if m.DecodeContent(&c) != nil {
			return
		}
		t.error(c.EName, c.EValue, strings.Join(c.Traceback, "\n"))
	case "execute_input":
		var c struct {
			ExecutionCount int `json:"execution_count"`
		}
		if m.DecodeContent(&c) == nil {
			t.emit(line{Type: "number_of_executions", Fields: map[string]any{"execution_count": c.ExecutionCount}})
		}
	}
}

// error emits an error line unless one was already sent.
func (t *translator) error(name, value, traceback string) {
	if t.errorSent {
		return
	}
	t.errorSent = true
	t.emit(line{Type: "error", Fields: map[string]any{"name": name, "value": value, "traceback": traceback}})
}
