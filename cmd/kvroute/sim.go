package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newSimCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sim",
		Short: "sim (not built yet: issue 4)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("sim is not built yet (issue 4)")
		},
	}
}
