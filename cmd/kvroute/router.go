package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newRouterCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "router",
		Short: "router (not built yet: issue 7)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("router is not built yet (issue 7)")
		},
	}
}
