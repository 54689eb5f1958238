//go:build !linux

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// localTemplateCommands: listing a data directory works on the server host
// (Linux) only.
func localTemplateCommands() []*cobra.Command { return nil }

// localBuildHelp describes `template build NAME` away from the server host.
func localBuildHelp() string {
	return "Without --dockerfile: building a built-in template (mmdebstrap, envd) runs on the\n" +
		"server host: `moat template build NAME` there."
}

// localBuildFlags: built-in templates are built on the server host (Linux).
type localBuildFlags struct{}

func (f *localBuildFlags) register(*cobra.Command) {}

func (f *localBuildFlags) run(_ *cobra.Command, name string) error {
	return fmt.Errorf("template build %s: built-in templates are built on the server host (Linux); "+
		"from here, build a Dockerfile with --dockerfile PATH --api-url URL", name)
}
