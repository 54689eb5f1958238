package benchcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/moatsh/moat/internal/app"
	"github.com/moatsh/moat/internal/build/buildbench"
)

// benchTemplateBuild prints the medians of cold, fully cached and
// last-step-changed template builds and their ratios; n is the number of
// rounds (the bench command's default of 20 is too many: 3 then).
func benchTemplateBuild(cmd *cobra.Command, dataDir string, cs app.ContainerSettings, n int, verbose bool) error {
	if !cmd.Flags().Changed("count") {
		n = 3
	}
	cfg := buildbench.Config{DataDir: dataDir, N: n, Package: "jq", Progress: cmd.ErrOrStderr(),
		NewRuntime: app.NewContainerRuntime(cs)}
	if verbose {
		cfg.BuildLog = cmd.ErrOrStderr()
	}
	rep, err := buildbench.Run(cmd.Context(), cfg)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "template build from a Debian 12 image (in-process registry): "+
		"RUN apt-get install %s, COPY, WORKDIR, RUN\n", cfg.Package)
	rep.Print(cmd.OutOrStdout())
	return nil
}
