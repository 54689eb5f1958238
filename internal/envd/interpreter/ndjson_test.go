package interpreter

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLineEncode(t *testing.T) {
	tests := []struct {
		name string
		in   line
		want string
	}{
		{"type first, sorted keys", line{Type: "stdout", Fields: map[string]any{"timestamp": "t", "text": "hi\n"}},
			`{"type": "stdout", "text": "hi\n", "timestamp": "t"}`},
		{"non-ascii escaped", line{Type: "stdout", Fields: map[string]any{"text": "h\u00e9 \u2713 \U0001F600"}},
			`{"type": "stdout", "text": "h\u00e9 \u2713 \ud83d\ude00"}`},
		{"invalid utf8 replaced", line{Type: "stdout", Fields: map[string]any{"text": "a\xffb"}},
			`{"type": "stdout", "text": "a\ufffdb"}`},
		{"no fields", line{Type: "x"}, `{"type": "x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.encode()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if strings.Contains(string(got), "\n") || !json.Valid(got) {
				t.Fatalf("not a single valid JSON line: %q", got)
			}
		})
	}
}

func TestResultFields(t *testing.T) {
	data := map[string]json.RawMessage{
		"text/plain":      json.RawMessage(`"'quoted'"`),
		"text/html":       json.RawMessage(`"<b>x</b>"`),
		"image/png":       json.RawMessage(`"iVBOR"`),
		"e2b/chart":       json.RawMessage(`{"type":"line"}`),
		"application/xyz": json.RawMessage(`{"k":1}`),
	}
	f := resultFields(data, true)
	b, _ := json.Marshal(f)
	want := `{"chart":{"type":"line"},"extra":{"application/xyz":{"k":1}},"html":"\u003cb\u003ex\u003c/b\u003e","is_main_result":true,"png":"iVBOR","text":"quoted"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

func TestStripQuotes(t *testing.T) {
	tests := []struct{ in, want string }{
		{`'a'`, "a"}, {`"a"`, "a"}, {`'a"`, `'a"`}, {`''`, ""}, {`'`, `'`}, {`2`, "2"}, {`'a' + 'b'`, `a' + 'b`},
	}
	for _, tt := range tests {
		if got := stripQuotes(tt.in); got != tt.want {
			t.Errorf("stripQuotes(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplitter(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		out    string
		rc     string
	}{
		{"one chunk", []string{"hello\nMARK0\n"}, "hello\n", "0"},
		{"marker split", []string{"abc MA", "RK1", "2\n"}, "abc ", "12"},
		{"utf8 split", []string{"\xc3", "\xa9MARK0\n"}, "\u00e9", "0"},
		{"no output", []string{"MARK0\n"}, "", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &splitter{marker: []byte("MARK")}
			var out strings.Builder
			for _, c := range tt.chunks {
				emitted := s.feed([]byte(c))
				if !strings.HasPrefix(tt.out[out.Len():], string(emitted)) {
					t.Fatalf("emitted %q out of order", emitted)
				}
				out.Write(emitted)
			}
			if out.String() != tt.out || !s.complete() || strings.TrimSpace(string(s.tail)) != tt.rc {
				t.Fatalf("out %q tail %q complete %v", out.String(), s.tail, s.complete())
			}
		})
	}
}

func TestNormalizeLanguage(t *testing.T) {
	tests := []struct{ in, norm, public string }{
		{"", "python", "python"}, {" Python ", "python", "python"}, {"js", "javascript", "javascript"},
		{"ts", "javascript", "typescript"}, {"TypeScript", "javascript", "typescript"}, {"R", "r", "r"}, {"bash", "bash", "bash"},
	}
	for _, tt := range tests {
		if n, p := normalizeLanguage(tt.in), publicLanguage(tt.in); n != tt.norm || p != tt.public {
			t.Errorf("%q: normalize=%q public=%q, want %q %q", tt.in, n, p, tt.norm, tt.public)
		}
	}
}
