package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/kvblock"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the block-key scheme and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gover := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				gover = bi.GoVersion
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kvroute %s (block-key scheme v%d, %s)\n", version, kvblock.SchemeVersion, gover)
			return nil
		},
	}
}
