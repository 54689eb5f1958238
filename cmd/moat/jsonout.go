package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// addJSONFlag registers --json: print the answer as JSON instead of a table.
func addJSONFlag(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "json", false, "print JSON (the SDK's field names) instead of a table")
}

// printJSON prints v as indented JSON unless err is set, which it returns.
func printJSON(cmd *cobra.Command, v any, err error) error {
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
	return err
}

// printJSONLine writes v as one line of JSON.
func printJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// newSandboxGetCmd is `moat sandbox get ID`: one sandbox's details.
func newSandboxGetCmd(cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show one sandbox: template, state, times, size, metadata",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := cf.client().GetSandbox(cmd.Context(), args[0])
			if err != nil || asJSON {
				if sb == nil {
					return printJSON(cmd, nil, err)
				}
				return printJSON(cmd, sb.Info, err)
			}
			i := sb.Info
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, row := range [][2]string{
				{"ID", i.ID}, {"TEMPLATE", i.TemplateID + aliasOf(i.Alias)}, {"STATE", i.State},
				{"STARTED", i.StartedAt.Local().Format(time.DateTime)}, {"EXPIRES", i.EndAt.Local().Format(time.DateTime)},
				{"CPU", fmt.Sprint(i.CPUCount)}, {"MEMORY", fmt.Sprintf("%dMB", i.MemoryMB)},
				{"DISK", fmt.Sprintf("%dMB", i.DiskSizeMB)}, {"ENVD", i.EnvdVersion},
			} {
				fmt.Fprintf(w, "%s\t%s\n", row[0], row[1])
			}
			for _, k := range slices.Sorted(maps.Keys(i.Metadata)) {
				fmt.Fprintf(w, "METADATA %s\t%s\n", k, i.Metadata[k])
			}
			return w.Flush()
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func aliasOf(a string) string {
	if a == "" {
		return ""
	}
	return " (" + a + ")"
}
