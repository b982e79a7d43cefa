package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newIndexerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "indexer",
		Short: "indexer (not built yet: issue 6)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("indexer is not built yet (issue 6)")
		},
	}
}
