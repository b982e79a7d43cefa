package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/agent"
)

func newAgentCmd() *cobra.Command {
	cfg := agent.DefaultConfig()
	var sf serverFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Mirror one vLLM instance's KV-cache events into the fleet index over NATS",
		Long: `The node agent runs beside one vLLM instance. It subscribes to the engine's ZMQ KV-cache
events, turns them into kvroute block keys, and publishes the net changes on NATS
(kvroute.v1.events.<instance>), answers snapshot requests (kvroute.v1.snapshot.<instance>) and
sends heartbeats with the load scraped from the engine's /metrics (kvroute.v1.heartbeat.<instance>).

Start vLLM with --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq",
"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv"}'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(sf.LogLevel, sf.LogFormat)
			if err != nil {
				return err
			}
			if cfg.AgentVersion == "" || cfg.AgentVersion == "dev" {
				cfg.AgentVersion = version
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			nc, closeNATS, err := sf.nats.connect("kvroute-agent", log)
			if err != nil {
				return err
			}
			defer closeNATS()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			a, err := agent.New(cfg, nc, reg, log)
			if err != nil {
				return err
			}
			addr := sf.MetricsListen
			if addr == "" {
				addr = sf.Listen
			}
			if addr != "" {
				stopHTTP, err := serveHTTP(addr, metricsHandler(reg), log, "agent metrics")
				if err != nil {
					return err
				}
				defer stopHTTP()
			}
			log.Info("agent starting", "instance", a.ID(), "engine", cfg.EngineURL, "zmq", cfg.ZMQEndpoint, "bind", cfg.ZMQBind)
			return a.Run(ctx)
		},
	}
	fs := cmd.Flags()
	sf.register(fs, serverDefaults{Listen: "", MetricsListen: ":9106", NoGRPC: true})
	fs.StringVar(&cfg.EngineURL, "engine-url", cfg.EngineURL, "base URL of the vLLM server, e.g. http://127.0.0.1:8000 (required)")
	fs.StringVar(&cfg.ZMQEndpoint, "zmq-endpoint", "tcp://127.0.0.1:5557", "the engine's KV-events ZMQ endpoint")
	fs.BoolVar(&cfg.ZMQBind, "zmq-bind", cfg.ZMQBind, "bind --zmq-endpoint (the engine connects) instead of dialling it")
	fs.StringVar(&cfg.ReplayEndpoint, "zmq-replay-endpoint", cfg.ReplayEndpoint, "the engine's replay ROUTER endpoint (empty = no replay: gaps start a new epoch)")
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "ZMQ topic prefix to subscribe to (empty = all)")
	fs.IntVar(&cfg.DPRank, "dp-rank", cfg.DPRank, "data-parallel rank to mirror (-1 = any)")
	fs.StringVar(&cfg.InstanceID, "instance-id", cfg.InstanceID, "instance id on NATS (default: derived from the engine URL's host:port)")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "served base model (default: read from the engine's /v1/models)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "engine block size in tokens until events say otherwise")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "heartbeat and /metrics scrape period")
	fs.DurationVar(&cfg.ModelsRefreshInterval, "models-refresh-interval", cfg.ModelsRefreshInterval, "period of re-reading the adapter list from /v1/models")
	fs.DurationVar(&cfg.EngineTimeout, "engine-timeout", cfg.EngineTimeout, "timeout of each HTTP request to the engine")
	fs.DurationVar(&cfg.ReplayTimeout, "replay-timeout", cfg.ReplayTimeout, "longest wait for each replay reply")
	fs.DurationVar(&cfg.MinResyncInterval, "min-resync-interval", cfg.MinResyncInterval, "least time between two orphan-triggered resyncs")
	fs.DurationVar(&cfg.CoalesceWindow, "coalesce-window", cfg.CoalesceWindow, "fold queued engine batches into one NATS batch within this window (0..5ms)")
	fs.IntVar(&cfg.SnapshotChunkKeys, "snapshot-chunk-keys", cfg.SnapshotChunkKeys, "keys per snapshot chunk (capped by the NATS max payload)")
	return cmd
}
