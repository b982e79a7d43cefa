package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newAgentCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "agent (not built yet: issue 5)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent is not built yet (issue 5)")
		},
	}
}
