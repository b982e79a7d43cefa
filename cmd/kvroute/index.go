package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newIndexCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "index",
		Short: "index (not built yet: issue 6)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("index is not built yet (issue 6)")
		},
	}
}
