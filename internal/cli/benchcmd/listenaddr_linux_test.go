package benchcmd

import "testing"

// TestListenAddr: the server's address is taken from its "moat listening
// on" line however the writes split it, after other lines, and once.
func TestListenAddr(t *testing.T) {
	for name, writes := range map[string][]string{
		"one write":   {"moat listening on 127.0.0.1:41000\n"},
		"split":       {"moat liste", "ning on 127.0.0.1:4", "1000\nmore\n"},
		"after lines": {"warning: x\n", "moat listening on 127.0.0.1:41000\n"},
	} {
		l := &listenAddr{found: make(chan string, 1)}
		for _, w := range writes {
			if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("%s: Write = %d, %v", name, n, err)
			}
		}
		select {
		case got := <-l.found:
			if got != "127.0.0.1:41000" {
				t.Errorf("%s: address %q", name, got)
			}
		default:
			t.Errorf("%s: no address", name)
		}
		if _, err := l.Write([]byte("moat listening on 127.0.0.1:1\n")); err != nil {
			t.Fatal(err)
		}
		if len(l.found) != 0 {
			t.Errorf("%s: a second address was sent", name)
		}
	}
	l := &listenAddr{found: make(chan string, 1)}
	_, _ = l.Write([]byte("moat listening on 127.0.0.1:41000")) // no newline yet
	if len(l.found) != 0 {
		t.Error("an address before its line ended")
	}
}
