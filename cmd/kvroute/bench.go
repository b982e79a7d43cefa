package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "bench (not built yet: issue 9)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("bench is not built yet (issue 9)")
		},
	}
}
