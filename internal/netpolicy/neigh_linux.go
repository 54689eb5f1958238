package netpolicy

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// The kernel's neighbour (ARP and NDP) tables are shared by every network
// namespace, and each sandbox puts two entries in each (the host side's
// for the sandbox, the sandbox's for its gateway). With Linux's defaults
// (gc_thresh3 = 1024) the table overflows at about 500 sandboxes: the
// kernel logs "neighbor table overflow" and new sandboxes' envd cannot be
// reached (moat bench --density: 7 of 1000 creates failed so, the first
// at the 523rd). Moat raises the limits, never lowers them.
var neighLimits = [3]int{8192, 32768, 65536} // gc_thresh1, 2, 3

// raiseNeighbourLimits raises the host's neighbour table thresholds of
// IPv4 and IPv6 to neighLimits where they are lower; sys is /proc/sys.
func raiseNeighbourLimits(log *slog.Logger, sys string) error {
	for _, fam := range []string{"ipv4", "ipv6"} {
		var raised []string
		for i, want := range neighLimits {
			p := fmt.Sprintf("%s/net/%s/neigh/default/gc_thresh%d", sys, fam, i+1)
			b, err := os.ReadFile(p)
			if os.IsNotExist(err) {
				// No IPv6 in this kernel, or a network namespace other than
				// the host's: the thresholds are global and only the
				// initial namespace shows them (set them on the host).
				log.Debug("neighbour table limits not visible here; left as they are", "family", fam)
				break
			}
			if err != nil {
				return fmt.Errorf("neighbour table limits: %w", err)
			}
			if cur, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && cur >= want {
				continue
			}
			if err := os.WriteFile(p, []byte(strconv.Itoa(want)), 0o644); err != nil {
				return fmt.Errorf("neighbour table limits: %w", err)
			}
			raised = append(raised, fmt.Sprintf("gc_thresh%d=%d", i+1, want))
		}
		if len(raised) > 0 {
			log.Info("raised the host's neighbour table limits for many sandboxes", "family", fam, "set", strings.Join(raised, " "))
		}
	}
	return nil
}
