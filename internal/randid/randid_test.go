package randid

import (
	"regexp"
	"testing"
)

func TestNew(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]*$`)
	seen := map[string]bool{}
	for _, n := range []int{0, 1, 20, 64} {
		for range 50 {
			id := New(n)
			if len(id) != n || !re.MatchString(id) {
				t.Fatalf("New(%d) = %q", n, id)
			}
			if n >= 20 && seen[id] {
				t.Fatalf("New(%d) repeated %q", n, id)
			}
			seen[id] = true
		}
	}
}
