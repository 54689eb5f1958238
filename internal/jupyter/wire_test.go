package jupyter

import (
	"encoding/json"
	"errors"
	"testing"
)

func sampleMessage() Message {
	return Message{
		Identities:   [][]byte{[]byte("peer")},
		Header:       newHeader("sess", "execute_result"),
		ParentHeader: newHeader("sess", "execute_request"),
		Metadata:     map[string]any{"a": 1.0},
		Content:      json.RawMessage(`{"data":{"text/plain":"2"}}`),
		Buffers:      [][]byte{[]byte("buf")},
	}
}

func TestWireRoundTrip(t *testing.T) {
	s := signer{key: []byte("secret")}
	m := sampleMessage()
	frames, err := s.encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.decode(frames)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got.Header != m.Header || got.ParentHeader != m.ParentHeader || string(got.Content) != string(m.Content) ||
		len(got.Buffers) != 1 || string(got.Identities[0]) != "peer" {
		t.Fatalf("round trip mismatch: %+v", got)
	}
}

func TestWireRejects(t *testing.T) {
	s := signer{key: []byte("secret")}
	good, err := s.encode(sampleMessage())
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func([][]byte) [][]byte) [][]byte {
		c := make([][]byte, len(good))
		for i, b := range good {
			c[i] = append([]byte(nil), b...)
		}
		return f(c)
	}
	tests := []struct {
		name   string
		frames [][]byte
		want   error
	}{
		{"empty", nil, ErrMalformed},
		{"no delimiter", [][]byte{[]byte("a"), []byte("b")}, ErrMalformed},
		{"too few frames", mutate(func(f [][]byte) [][]byte { return f[:4] }), ErrMalformed},
		{"bad signature", mutate(func(f [][]byte) [][]byte { f[2] = []byte("00"); return f }), ErrBadSignature},
		{"tampered content", mutate(func(f [][]byte) [][]byte { f[6] = []byte(`{"x":1}`); return f }), ErrBadSignature},
		{"wrong key", mutate(func(f [][]byte) [][]byte {
			g, _ := signer{key: []byte("other")}.encode(sampleMessage())
			return g
		}), ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.decode(tt.frames)
			if !errors.Is(err, tt.want) {
				t.Fatalf("decode err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestWireMalformedJSON(t *testing.T) {
	s := signer{key: []byte("k")}
	tests := []struct {
		name                          string
		header, parent, meta, content string
	}{
		{"header not json", `{`, `{}`, `{}`, `{}`},
		{"no msg_type", `{"msg_id":"1"}`, `{}`, `{}`, `{}`},
		{"parent not object", `{"msg_type":"x"}`, `[]`, `{}`, `{}`},
		{"metadata not object", `{"msg_type":"x"}`, `{}`, `3`, `{}`},
		{"content not json", `{"msg_type":"x"}`, `{}`, `{}`, `nope`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := [][]byte{[]byte(tt.header), []byte(tt.parent), []byte(tt.meta), []byte(tt.content)}
			frames := append([][]byte{delimiter, s.sign(parts...)}, parts...)
			if _, err := s.decode(frames); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestWireUnknownType(t *testing.T) {
	s := signer{key: []byte("k")}
	m := sampleMessage()
	m.Header.MsgType = "comm_msg_from_the_future"
	frames, _ := s.encode(m)
	got, err := s.decode(frames)
	if err != nil || got.Type() != "comm_msg_from_the_future" {
		t.Fatalf("unknown type: %v %v", got.Type(), err)
	}
}

func FuzzDecode(f *testing.F) {
	s := signer{key: []byte("k")}
	good, _ := s.encode(sampleMessage())
	join := func(fr [][]byte) []byte {
		var out []byte
		for _, b := range fr {
			out = append(out, b...)
			out = append(out, 0)
		}
		return out
	}
	f.Add(join(good))
	f.Add([]byte("<IDS|MSG>\x00\x00{}\x00{}\x00{}\x00{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var frames [][]byte
		start := 0
		for i, b := range data {
			if b == 0 {
				frames = append(frames, data[start:i])
				start = i + 1
			}
		}
		frames = append(frames, data[start:])
		m, err := s.decode(frames)
		if err == nil && m.Type() == "" {
			t.Fatalf("accepted message without type")
		}
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}
