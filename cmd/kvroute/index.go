package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// indexClientFlags say how to reach a gRPC Index API.
type indexClientFlags struct {
	Addr     string
	TLS      bool
	TLSCA    string
	Insecure bool
	Timeout  time.Duration
	JSON     bool
}

func (f *indexClientFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.Addr, "addr", "127.0.0.1:9107", "address of the gRPC Index API, HOST:PORT")
	fs.BoolVar(&f.TLS, "tls", false, "connect with TLS")
	fs.StringVar(&f.TLSCA, "tls-ca", "", "PEM CA file to verify the server (implies --tls)")
	fs.BoolVar(&f.Insecure, "tls-insecure-skip-verify", false, "with --tls, do not verify the server certificate")
	fs.DurationVar(&f.Timeout, "timeout", 10*time.Second, "timeout of the call")
	fs.BoolVar(&f.JSON, "json", false, "print JSON instead of a table")
}

func (f *indexClientFlags) dial() (kvroutev1.IndexClient, func(), error) {
	creds := insecure.NewCredentials()
	if f.TLS || f.TLSCA != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.Insecure} //nolint:gosec // opt-in flag
		if f.TLSCA != "" {
			pem, err := os.ReadFile(f.TLSCA)
			if err != nil {
				return nil, nil, usageError{fmt.Errorf("--tls-ca: %w", err)}
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, usageError{fmt.Errorf("--tls-ca %s: no certificates", f.TLSCA)}
			}
			tc.RootCAs = pool
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(f.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("index: dial %s: %w", f.Addr, err)
	}
	return kvroutev1.NewIndexClient(conn), func() { _ = conn.Close() }, nil
}

// callIndex dials the index, makes one call within --timeout, and prints the reply as JSON
// with --json or through table otherwise.
func callIndex[T proto.Message](cmd *cobra.Command, f *indexClientFlags, what string,
	call func(context.Context, kvroutev1.IndexClient) (T, error), table func(io.Writer, T) error) error {
	c, closeConn, err := f.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(cmd.Context(), f.Timeout)
	defer cancel()
	resp, err := call(ctx, c)
	if err != nil {
		return fmt.Errorf("index %s: %w", what, err)
	}
	if f.JSON {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	return table(cmd.OutOrStdout(), resp)
}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func newIndexCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "index",
		Short: "Query a running index over its gRPC Index API (lookup, instances, stats)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newIndexLookupCmd(), newIndexInstancesCmd(), newIndexStatsCmd())
	return cmd
}

func newIndexLookupCmd() *cobra.Command {
	var f indexClientFlags
	var body string
	var showKeys bool
	cmd := &cobra.Command{
		Use:   "lookup --body request.json",
		Short: "Show which instances cache the prompt prefix of an OpenAI request body",
		Long: `lookup sends an OpenAI /v1/chat/completions or /v1/completions request body (a file, or '-'
for stdin) to the index, which tokenizes it, computes its block keys, and answers with every
instance holding a leading run of them, best first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if body == "" {
				return usageError{errors.New("--body is required (a JSON file, or - for stdin)")}
			}
			var data []byte
			var err error
			if body == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(body)
			}
			if err != nil {
				return usageError{fmt.Errorf("--body: %w", err)}
			}
			lookup := func(ctx context.Context, c kvroutev1.IndexClient) (*kvroutev1.LookupResponse, error) {
				return c.Lookup(ctx, &kvroutev1.LookupRequest{Query: &kvroutev1.LookupRequest_OpenaiBody{OpenaiBody: data}})
			}
			return callIndex(cmd, &f, "lookup", lookup, func(out io.Writer, resp *kvroutev1.LookupResponse) error {
				return writeLookup(out, resp, showKeys)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&body, "body", "", "OpenAI request body: a JSON file, or - for stdin")
	cmd.Flags().BoolVar(&showKeys, "keys", false, "also print the prompt's block keys")
	return cmd
}

func writeLookup(out io.Writer, resp *kvroutev1.LookupResponse, showKeys bool) error {
	fmt.Fprintf(out, "prompt: %d tokens, %d full blocks of %d tokens\n", resp.PromptTokens, resp.TotalBlocks, resp.BlockSize)
	if len(resp.Matches) == 0 {
		fmt.Fprintln(out, "no instance holds the first block")
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tBLOCKS\tTOKENS\tOF PROMPT")
		for _, m := range resp.Matches {
			pct := 0.0
			if resp.PromptTokens > 0 {
				pct = 100 * float64(m.MatchedTokens) / float64(resp.PromptTokens)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\n", m.Instance, m.MatchedBlocks, m.MatchedTokens, pct)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if showKeys {
		for i, k := range resp.Keys {
			fmt.Fprintf(out, "key[%d] %016x\n", i, k)
		}
	}
	return nil
}

func newIndexInstancesCmd() *cobra.Command {
	var f indexClientFlags
	cmd := &cobra.Command{
		Use:   "instances",
		Short: "List the instances the index knows: state, blocks, load, warm-up",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list := func(ctx context.Context, c kvroutev1.IndexClient) (*kvroutev1.ListInstancesResponse, error) {
				return c.ListInstances(ctx, &kvroutev1.ListInstancesRequest{})
			}
			return callIndex(cmd, &f, "instances", list, func(out io.Writer, resp *kvroutev1.ListInstancesResponse) error {
				return writeInstancesTable(out, resp.Instances, time.Now())
			})
		},
	}
	f.register(cmd)
	return cmd
}

func writeInstancesTable(out io.Writer, insts []*kvroutev1.InstanceInfo, now time.Time) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tSTATE\tBLOCKS\tMODEL\tENGINE\tRUNNING\tWAITING\tKV USE\tHIT RATE\tFLEET\tWARM-UP\tEPOCH/SEQ\tLAST HEARTBEAT")
	for _, in := range insts {
		d := in.GetDescriptor_()
		l := in.GetLoad()
		w := in.GetWarmup()
		warm := "cold"
		if w.GetWarm() {
			warm = (time.Duration(w.GetWarmupSeconds() * float64(time.Second))).Round(time.Millisecond).String()
		}
		model := d.GetModel()
		if n := len(d.GetAdapters()); n > 0 {
			model += fmt.Sprintf(" (+%d adapters)", n)
		}
		hb := "never"
		if t := in.GetLastHeartbeatUnixNano(); t > 0 {
			hb = now.Sub(time.Unix(0, t)).Round(time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%.0f%%\t%.1f%%\t%.1f%%\t%s\t%d/%d\t%s\n",
			d.GetId(), strings.ToLower(strings.TrimPrefix(in.GetState().String(), "INSTANCE_STATE_")), in.GetBlocks(),
			model, d.GetEngineUrl(), l.GetRunning(), l.GetWaiting(), 100*l.GetKvUsage(),
			100*w.GetHitRate(), 100*w.GetFleetHitRate(), warm, in.GetEpoch(), in.GetLastSeq(), hb)
	}
	return tw.Flush()
}

func newIndexStatsCmd() *cobra.Command {
	var f indexClientFlags
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Print the index's sizes and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stats := func(ctx context.Context, c kvroutev1.IndexClient) (*kvroutev1.StatsResponse, error) {
				return c.Stats(ctx, &kvroutev1.StatsRequest{})
			}
			return callIndex(cmd, &f, "stats", stats, func(out io.Writer, st *kvroutev1.StatsResponse) error {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "keys\t%d\nentries\t%d\ninstances\t%d\nmax keys\t%d\nevictions\t%d\nevents applied\t%d\ngaps\t%d\nsnapshots\t%d\nlookups\t%d\n",
					st.Keys, st.Entries, st.Instances, st.MaxKeys, st.Evictions, st.EventsApplied, st.Gaps, st.Snapshots, st.Lookups)
				return tw.Flush()
			})
		},
	}
	f.register(cmd)
	return cmd
}
