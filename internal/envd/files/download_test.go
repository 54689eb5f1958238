package files

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
)

func TestIdentityAcceptable(t *testing.T) {
	tests := []struct {
		accept string
		want   bool
	}{
		{"", true},
		{"gzip", true},
		{"gzip, deflate, br", true},
		{"gzip, identity;q=0", false},
		{"gzip, *;q=0", false},
		{"gzip, *;q=0, identity", true},
		{"gzip, identity;q=0.5", true},
		{"gzip;q=1, IDENTITY;q=0", false},
	}
	for _, tt := range tests {
		if got := identityAcceptable(tt.accept); got != tt.want {
			t.Errorf("identityAcceptable(%q) = %v, want %v", tt.accept, got, tt.want)
		}
	}
}

func TestWorthCompressing(t *testing.T) {
	random := make([]byte, 1<<20)
	rand.Read(random)
	text := []byte(strings.Repeat("moat runs untrusted code in disposable sandboxes, line after line\n", 1<<14))
	// A compressible header does not make a random file worth gzip: the
	// middle and end samples decide too.
	mixed := append(append([]byte(nil), text[:sampleChunk]...), random...)
	tests := []struct {
		name string
		data []byte
		want bool
	}{
		{"random", random, false},
		{"text", text, true},
		{"tiny text", text[:100], false},
		{"empty", nil, false},
		{"text header, random body", mixed, false},
		{"text shorter than the samples", text[:5000], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := worthCompressing(bytes.NewReader(tt.data), int64(len(tt.data))); got != tt.want {
				t.Errorf("worthCompressing = %v, want %v", got, tt.want)
			}
		})
	}
}
