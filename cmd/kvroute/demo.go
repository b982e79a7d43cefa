package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "demo (not built yet: issue 8)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("demo is not built yet (issue 8)")
		},
	}
}
