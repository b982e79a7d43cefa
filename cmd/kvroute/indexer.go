package main

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/tokenizer"
)

func newIndexerCmd() *cobra.Command {
	cfg := indexer.DefaultConfig()
	var (
		sf          serverFlags
		tlsCert     string
		tlsKey      string
		tokDir      string
		noTokenizer bool
	)
	cmd := &cobra.Command{
		Use:   "indexer",
		Short: "Run the fleet's prefix-block index standalone behind the gRPC Index API",
		Long: `indexer subscribes to the agents' NATS subjects (kvroute.v1.events.>, kvroute.v1.heartbeat.>),
keeps the fleet-wide prefix-block index (asking agents for snapshots after gaps or lost
history), and serves it over the gRPC Index API (with health and reflection) for tools,
dashboards and routers that prefer a shared index. /metrics is served on --metrics-listen
(or --listen). The router embeds the same index in-process by default.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(sf.LogLevel, sf.LogFormat)
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			if sf.GRPCListen == "" {
				return usageError{errors.New("--grpc-listen is required")}
			}
			var tok tokenizer.Tokenizer
			switch {
			case noTokenizer:
			case tokDir != "":
				m, err := tokenizer.Load(tokDir)
				if err != nil {
					return err
				}
				tok = m
			default:
				m, err := tokenizer.Default()
				if err != nil {
					return err
				}
				tok = m
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			nc, closeNATS, err := sf.nats.connect("kvroute-indexer", log)
			if err != nil {
				return err
			}
			defer closeNATS()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			svc, err := indexer.New(cfg, nc, reg, log)
			if err != nil {
				return err
			}
			if err := svc.Start(ctx); err != nil {
				return err
			}
			defer func() { _ = svc.Close() }()
			ep, err := indexer.NewGRPCServer(svc, tok, log).Serve(indexer.GRPCConfig{
				ListenAddr: sf.GRPCListen, TLSCertFile: tlsCert, TLSKeyFile: tlsKey})
			if err != nil {
				return err
			}
			defer func() { _ = ep.Close() }()
			log.Info("index API (gRPC)", "addr", ep.Addr(), "tls", tlsCert != "")
			addr := sf.MetricsListen
			if addr == "" {
				addr = sf.Listen
			}
			if addr != "" {
				stopHTTP, err := serveHTTP(addr, metricsHandler(reg), log, "indexer metrics")
				if err != nil {
					return err
				}
				defer stopHTTP()
			}
			<-ctx.Done()
			log.Info("indexer stopping")
			return nil
		},
	}
	fs := cmd.Flags()
	sf.register(fs, serverDefaults{Listen: "", GRPCListen: ":9107", MetricsListen: ":9108"})
	fs.IntVar(&cfg.MaxKeys, "max-keys", cfg.MaxKeys, "most distinct block keys held; least recently touched keys are evicted beyond it (0 = unbounded)")
	fs.IntVar(&cfg.MaxInstances, "max-instances", cfg.MaxInstances, "most instances tracked at once (1..4096)")
	fs.DurationVar(&cfg.StaleAfter, "stale-after", cfg.StaleAfter, "no heartbeat for this long marks an instance stale (its keys still count)")
	fs.DurationVar(&cfg.InstanceTTL, "instance-ttl", cfg.InstanceTTL, "no heartbeat for this long removes an instance with its keys")
	fs.DurationVar(&cfg.GoneRetention, "gone-retention", cfg.GoneRetention, "how long a removed instance stays listed as gone")
	fs.DurationVar(&cfg.SnapshotTimeout, "snapshot-timeout", cfg.SnapshotTimeout, "longest wait for each snapshot chunk from an agent")
	fs.DurationVar(&cfg.SnapshotRetryMin, "snapshot-retry-min", cfg.SnapshotRetryMin, "first backoff after a failed snapshot")
	fs.DurationVar(&cfg.SnapshotRetryMax, "snapshot-retry-max", cfg.SnapshotRetryMax, "largest backoff between failed snapshots")
	fs.Uint32Var(&cfg.SnapshotChunkKeys, "snapshot-chunk-keys", cfg.SnapshotChunkKeys, "keys per snapshot chunk asked of agents (0 = the agent's default)")
	fs.IntVar(&cfg.MaxBufferedBatches, "max-buffered-batches", cfg.MaxBufferedBatches, "batches buffered per instance while its snapshot is in flight")
	fs.IntVar(&cfg.QueueLength, "queue-length", cfg.QueueLength, "ingestion queue length in NATS messages (overflow shows up as gaps, repaired by snapshots)")
	fs.DurationVar(&cfg.WarmupWindow, "warmup-window", cfg.WarmupWindow, "sliding window of the prefix-cache hit rates used for warm-up")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "tokens per block for lookups when no instance reports one")
	fs.StringVar(&cfg.Name, "name", cfg.Name, "name of this index in snapshot requests")
	fs.StringVar(&tlsCert, "grpc-tls-cert", "", "PEM certificate file: serve gRPC over TLS (with --grpc-tls-key)")
	fs.StringVar(&tlsKey, "grpc-tls-key", "", "PEM key file for --grpc-tls-cert")
	fs.StringVar(&tokDir, "tokenizer-dir", "", "model directory (tokenizer.json, tokenizer_config.json) for OpenAI-body lookups (default: the embedded Qwen3 tokenizer)")
	fs.BoolVar(&noTokenizer, "no-tokenizer", false, "no tokenizer: OpenAI-body lookups accept token-id prompts only")
	return cmd
}
