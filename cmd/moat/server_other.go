//go:build !linux

package main

import "github.com/spf13/cobra"

// serverCommands: serve, apikey and bench run on the server host (Linux);
// elsewhere moat is a client of a remote `moat serve`.
func serverCommands() []*cobra.Command { return nil }
