// Command kvroute is the single binary of kvroute: the router, the node agent, the
// standalone indexer, the engine simulator, the benchmark, the one-machine demo and the
// tools (tokenize, index). Each subcommand lives in a file of its own name; the shared
// configuration plumbing (flags, environment, YAML file) is in config.go.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kvroute:", err)
		code := 1
		var ue usageError
		if errors.As(err, &ue) {
			code = 2
		}
		os.Exit(code)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "kvroute",
		Short: "kvroute: a KV-cache-aware router for vLLM fleets",
		Long: `kvroute sends each LLM request to the vLLM instance that already holds the request's
prompt prefix in its KV cache. Agents beside each engine turn its KV-cache events into a
fleet-wide prefix-block index; the router asks the index which instance holds the longest
prefix, and falls back to hash affinity and load-based overflow.

Every flag may also be given as an environment variable KVROUTE_<FLAG> (upper case, '-' as
'_', e.g. KVROUTE_NATS) or as a key of the YAML file named by --config. Precedence:
flag > environment > file > default.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyConfig(cmd) },
	}
	root.PersistentFlags().String("config", "", "YAML file with flag values (keys are flag names)")
	root.AddCommand(
		newRouterCmd(),
		newAgentCmd(),
		newIndexerCmd(),
		newSimCmd(),
		newBenchCmd(),
		newDemoCmd(),
		newTokenizeCmd(),
		newIndexCmd(),
		newVersionCmd(),
	)
	return root
}
