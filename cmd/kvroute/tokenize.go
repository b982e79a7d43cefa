package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newTokenizeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "tokenize",
		Short: "tokenize (not built yet: issue 3)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("tokenize is not built yet (issue 3)")
		},
	}
}
