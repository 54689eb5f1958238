package mcpserver

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// capped is a writer that keeps the first max bytes written to it and
// counts the rest, so that a chatty command cannot grow the server's
// memory or the answer.
type capped struct {
	max   int
	b     strings.Builder
	total int
}

func newCapped(max int) *capped { return &capped{max: max} }

// Write keeps what fits and never fails.
func (c *capped) Write(p []byte) (int, error) {
	c.total += len(p)
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// String is what was kept (cut on a rune boundary) and, when something
// was dropped, a note saying how much.
func (c *capped) String() string {
	s := c.b.String()
	if c.total <= len(s) {
		return s
	}
	// A rune cut in two by the limit is dropped whole.
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s + fmt.Sprintf("\n[truncated: %d of %d bytes shown]", len(s), c.total)
}
