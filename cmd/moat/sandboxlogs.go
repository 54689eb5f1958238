package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	moat "github.com/moatsh/moat/sdk/go"
)

// logsPoll is how often `moat sandbox logs -f` asks for new lines.
const logsPoll = time.Second

// newSandboxLogsCmd is `moat sandbox logs ID [-f]`: the sandbox's own log.
func newSandboxLogsCmd(cf *clientFlags) *cobra.Command {
	var (
		follow, asJSON bool
		q              moat.LogQuery
		since          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a sandbox's log (envd's output; on a microVM also its console), -f to follow it",
		Long: "Print the sandbox's own log: envd's lines (processes started and ended, errors) and, on a microVM, the\n" +
			"guest's console. -f keeps printing new lines until the sandbox is gone or you interrupt it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if since > 0 {
				q.Cursor = time.Now().Add(-since)
			}
			return followLogs(cmd.Context(), cf.client(), args[0], q, follow, func(es []moat.LogEntry) error {
				if asJSON {
					for _, e := range es {
						if err := printJSONLine(cmd.OutOrStdout(), e); err != nil {
							return err
						}
					}
					return nil
				}
				return printLogs(cmd.OutOrStdout(), es)
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the sandbox is gone")
	f.StringVar(&q.Level, "level", "", "the least level to print: debug, info, warn or error")
	f.StringVar(&q.Search, "search", "", "print only lines whose message contains this (case-sensitive)")
	f.DurationVar(&since, "since", 0, "print only lines of the last DURATION (e.g. 10m)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each entry as a line of JSON (the API's field names)")
	return cmd
}

// followLogs prints id's entries from q.Cursor with print, page after
// page (the server's pages hold 1000); with follow it then asks every
// logsPoll for those after the last one printed, until ctx ends or the
// sandbox is gone (which ends it without an error).
func followLogs(ctx context.Context, c *moat.Client, id string, q moat.LogQuery, follow bool, print func([]moat.LogEntry) error) error {
	const page = 1000
	q.Limit = page
	seen := 0 // entries printed at q.Cursor's millisecond, which the next page repeats
	for {
		es, err := c.Logs(ctx, id, q)
		if follow && (errors.Is(err, moat.ErrNotFound) || ctx.Err() != nil) {
			return nil
		}
		if err != nil {
			return err
		}
		fresh := es
		if !q.Cursor.IsZero() {
			fresh = es[min(seen, len(es)):]
		}
		if err := print(fresh); err != nil {
			return err
		}
		full := len(es) == page
		if len(es) > 0 {
			last := es[len(es)-1].Timestamp.Truncate(time.Millisecond)
			n := 0
			for _, e := range es {
				if e.Timestamp.Truncate(time.Millisecond).Equal(last) {
					n++
				}
			}
			// es holds every entry from the cursor on, so n is all of
			// those at last's millisecond.
			if full && n == len(es) { // a page of one millisecond: go past it
				last, n = last.Add(time.Millisecond), 0
			}
			q.Cursor, seen = last, n
		}
		if full {
			continue
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logsPoll):
		}
	}
}

// printLogs prints entries as "TIME LEVEL MESSAGE key=value ...".
func printLogs(w io.Writer, es []moat.LogEntry) error {
	for _, e := range es {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %-5s %s", e.Timestamp.Local().Format("2006-01-02 15:04:05.000"), strings.ToUpper(string(e.Level)), e.Message)
		for _, k := range slices.Sorted(maps.Keys(e.Fields)) {
			fmt.Fprintf(&b, " %s=%s", k, quoteIfNeeded(e.Fields[k]))
		}
		if _, err := fmt.Fprintln(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
