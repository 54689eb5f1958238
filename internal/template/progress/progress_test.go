package progress

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgressPlain(t *testing.T) {
	var buf bytes.Buffer
	p := New(&buf, "title")
	p.Line("I: step one")
	p.Line("noise")
	p.Close(nil)
	out := buf.String()
	if strings.Contains(out, "noise") {
		t.Errorf("plain output shows non-status lines:\n%s", out)
	}
	for _, want := range []string{"title", "I: step one", "done"} {
		if !strings.Contains(out, want) {
			t.Errorf("output misses %q:\n%s", want, out)
		}
	}
}
