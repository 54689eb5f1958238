package netpolicy

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRaiseNeighbourLimits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v4, v6   []int // current gc_thresh1..3 (nil: the family is absent)
		want4    []int
		want6    []int
		wantFail bool
	}{
		{"linux defaults are raised", []int{128, 512, 1024}, []int{128, 512, 1024}, neighLimits[:], neighLimits[:], false},
		{"higher values stay", []int{100000, 200000, 300000}, []int{128, 512, 1024}, []int{100000, 200000, 300000}, neighLimits[:], false},
		{"no IPv6", []int{128, 512, 1024}, nil, neighLimits[:], nil, false},
		{"not visible (a namespace other than the host's): left alone", nil, nil, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			write := func(fam string, vals []int) {
				for i, v := range vals {
					p := filepath.Join(sys, "net", fam, "neigh", "default", fmt.Sprintf("gc_thresh%d", i+1))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(fmt.Sprintln(v)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			write("ipv4", tc.v4)
			write("ipv6", tc.v6)
			err := raiseNeighbourLimits(slog.New(slog.DiscardHandler), sys)
			if (err != nil) != tc.wantFail {
				t.Fatalf("err %v, want failure %v", err, tc.wantFail)
			}
			for fam, want := range map[string][]int{"ipv4": tc.want4, "ipv6": tc.want6} {
				for i, w := range want {
					b, _ := os.ReadFile(filepath.Join(sys, "net", fam, "neigh", "default", fmt.Sprintf("gc_thresh%d", i+1)))
					if got := strings.TrimSpace(string(b)); got != fmt.Sprint(w) {
						t.Errorf("%s gc_thresh%d = %s, want %d", fam, i+1, got, w)
					}
				}
			}
		})
	}
}
