package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/dashboard"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/tokenizer"
)

func newRouterCmd() *cobra.Command {
	cfg := router.DefaultConfig()
	icfg := indexer.DefaultConfig()
	var sf serverFlags
	var tokDir string
	cmd := &cobra.Command{
		Use:   "router",
		Short: "Route OpenAI requests to the vLLM instance that holds their prompt prefix",
		Long: `The router is an OpenAI-compatible reverse proxy (/v1/chat/completions, /v1/completions,
/v1/models, SageMaker-style /invocations). It discovers instances from the agents' heartbeats
on NATS and keeps the prefix-block index in process (or uses a static --engines list), then
routes each request by cache hit, hash affinity and overflow (--policy kv-aware), or by one
strategy alone for comparison (prefix-hash = SageMaker PREFIX_AWARE, least-request, random).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(sf.LogLevel, sf.LogFormat)
			if err != nil {
				return err
			}
			// The command serves the router's handler itself, with the dashboard beside it.
			cfg.ListenAddr = ""
			if sf.MetricsListen != "" {
				cfg.MetricsPath = ""
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			var tok tokenizer.Tokenizer
			switch cfg.TokenizerMode {
			case router.TokenizerLocal:
				var m *tokenizer.Model
				if tokDir != "" {
					m, err = tokenizer.Load(tokDir)
				} else {
					m, err = tokenizer.Default()
				}
				if err != nil {
					return err
				}
				tok = m
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			deps := router.Deps{Tokenizer: tok, Registry: reg, Log: log}
			if len(cfg.Engines) == 0 {
				nc, closeNATS, err := sf.nats.connect("kvroute-router-"+cfg.RouterID, log)
				if err != nil {
					return err
				}
				defer closeNATS()
				svc, err := indexer.New(icfg, nc, reg, log)
				if err != nil {
					return err
				}
				if err := svc.Start(ctx); err != nil {
					return err
				}
				defer svc.Close()
				deps.NATS, deps.Index = nc, svc
				if sf.GRPCListen != "" {
					ep, err := indexer.NewGRPCServer(svc, tok, log).Serve(indexer.GRPCConfig{ListenAddr: sf.GRPCListen})
					if err != nil {
						return err
					}
					defer func() { _ = ep.Close() }()
					log.Info("index API (gRPC)", "addr", ep.Addr())
				}
			}
			r, err := router.New(cfg, deps)
			if err != nil {
				return err
			}
			if err := r.Start(ctx); err != nil {
				return err
			}
			defer r.Close()
			dash, err := dashboard.New(dashboard.DefaultConfig(), dashboard.FromRouter(r))
			if err != nil {
				return err
			}
			go dash.Run(ctx)
			stopHTTP, err := serveHTTP(sf.Listen, dashboard.RouterHandler(r, dash), log, "router")
			if err != nil {
				return err
			}
			defer stopHTTP()
			if sf.MetricsListen != "" {
				stopMetrics, err := serveHTTP(sf.MetricsListen, metricsHandler(reg), log, "router metrics")
				if err != nil {
					return err
				}
				defer stopMetrics()
			}
			<-ctx.Done()
			log.Info("router stopping")
			return nil
		},
	}
	fs := cmd.Flags()
	sf.register(fs, serverDefaults{Listen: ":8080"})
	fs.StringVar(&cfg.Policy, "policy", cfg.Policy, "routing policy: kv-aware, prefix-hash (SageMaker PREFIX_AWARE), least-request, random")
	fs.StringSliceVar(&cfg.Engines, "engines", nil, "static engine base URLs, comma-separated (no NATS discovery, no index: affinity and load only)")
	fs.StringVar(&cfg.TokenizerMode, "tokenizer", cfg.TokenizerMode, "how prompts become token ids: local (embedded Qwen3 or --tokenizer-dir), engine (each instance's /tokenize), none")
	fs.StringVar(&tokDir, "tokenizer-dir", "", "model directory with tokenizer.json and tokenizer_config.json (default: the embedded Qwen3 tokenizer)")
	fs.StringVar(&cfg.RouterID, "router-id", "", "this replica's id on NATS (default: hostname-pid)")
	fs.StringVar(&cfg.GroupHeader, "group-header", cfg.GroupHeader, "routing-group header (the body's prompt_cache_key is the fallback)")
	fs.IntVar(&cfg.PrefixLengthChars, "prefix-length", cfg.PrefixLengthChars, "characters of the canonical prompt hashed for affinity")
	fs.IntVar(&cfg.PrefixLengthBytes, "prefix-length-bytes", cfg.PrefixLengthBytes, "bytes of the body hashed for affinity on /invocations")
	fs.IntVar(&cfg.ConcurrencyThreshold, "concurrency-threshold", cfg.ConcurrencyThreshold, "in-flight requests (fleet-wide) at which an instance overflows, 1..1024")
	fs.IntVar(&cfg.HardInFlightLimit, "hard-limit", cfg.HardInFlightLimit, "in-flight requests at which an instance takes nothing more; all there → 429 (0 = none)")
	fs.IntVar(&cfg.MinMatchTokens, "min-match-tokens", cfg.MinMatchTokens, "shortest cached prefix, in tokens, that counts as a cache hit")
	fs.DurationVar(&cfg.PendingTTL, "pending-ttl", cfg.PendingTTL, "how long a routed request's keys count as held by its instance before the index confirms them")
	fs.DurationVar(&cfg.PendingConfirmGrace, "pending-confirm-grace", cfg.PendingConfirmGrace, "after the engine answered, how long the index gets to confirm pending keys")
	fs.IntVar(&cfg.PendingMaxKeys, "pending-max-keys", cfg.PendingMaxKeys, "capacity of the pending overlay, in keys")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", cfg.MaxBodyBytes, "largest request body, in bytes (larger → 413)")
	fs.DurationVar(&cfg.BodyReadTimeout, "body-read-timeout", cfg.BodyReadTimeout, "the whole request body must arrive within this (→ 408)")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", cfg.ConnectTimeout, "upstream TCP connect timeout")
	fs.DurationVar(&cfg.FirstByteTimeout, "first-byte-timeout", cfg.FirstByteTimeout, "upstream response-header timeout (→ 504)")
	fs.DurationVar(&cfg.TotalTimeout, "total-timeout", cfg.TotalTimeout, "whole-request timeout")
	fs.IntVar(&cfg.MaxIdleConnsPerInstance, "max-idle-conns", cfg.MaxIdleConnsPerInstance, "keep-alive connections kept per instance")
	fs.StringVar(&cfg.HealthPath, "health-path", cfg.HealthPath, "engine path for active health checks")
	fs.DurationVar(&cfg.HealthInterval, "health-interval", cfg.HealthInterval, "active health-check period")
	fs.DurationVar(&cfg.HealthTimeout, "health-timeout", cfg.HealthTimeout, "active health-check timeout")
	fs.IntVar(&cfg.EjectFailures, "eject-failures", cfg.EjectFailures, "failures within --eject-window that eject an instance")
	fs.DurationVar(&cfg.EjectWindow, "eject-window", cfg.EjectWindow, "window for counting failures")
	fs.DurationVar(&cfg.EjectCooldown, "eject-cooldown", cfg.EjectCooldown, "how long an ejected instance gets no traffic")
	fs.DurationVar(&cfg.InFlightPublishInterval, "inflight-interval", cfg.InFlightPublishInterval, "period of publishing in-flight counts to other replicas (≤ 250ms)")
	fs.DurationVar(&cfg.ScrapeInterval, "scrape-interval", cfg.ScrapeInterval, "static mode: period of reading each engine's /metrics and /v1/models")
	fs.Float64Var(&cfg.PrefillPriorTokensPerSecond, "prefill-prior", cfg.PrefillPriorTokensPerSecond, "prefill rate (tokens/s) assumed before an instance's first measured TTFT")
	fs.BoolVar(&cfg.DebugHeaders, "debug-headers", cfg.DebugHeaders, "add X-Kvroute-Instance and X-Kvroute-Decision response headers")
	fs.IntVar(&cfg.PrewarmPrefixes, "prewarm-prefixes", cfg.PrewarmPrefixes, "replay this many of the hottest prefixes (max_tokens=1) to a newly discovered instance before it takes traffic (0 = off)")
	fs.DurationVar(&cfg.PrewarmTimeout, "prewarm-timeout", cfg.PrewarmTimeout, "a pre-warming newcomer joins after this long however far it got")
	fs.IntVar(&cfg.PrewarmConcurrency, "prewarm-concurrency", cfg.PrewarmConcurrency, "pre-warming replays in flight at once per newcomer")
	fs.IntVar(&cfg.PrewarmMaxTokens, "prewarm-max-tokens", cfg.PrewarmMaxTokens, "longest prefix kept and replayed, in tokens")
	fs.DurationVar(&cfg.PrewarmHalfLife, "prewarm-half-life", cfg.PrewarmHalfLife, "a request counts half as much toward a prefix's heat after this long")
	fs.IntVar(&icfg.MaxKeys, "index-max-keys", icfg.MaxKeys, "in-process index: most keys kept (least recently touched evicted)")
	fs.DurationVar(&icfg.StaleAfter, "instance-stale-after", icfg.StaleAfter, "in-process index: no heartbeat for this long → stale (not routed to)")
	fs.DurationVar(&icfg.InstanceTTL, "instance-ttl", icfg.InstanceTTL, "in-process index: no heartbeat for this long → gone")
	return cmd
}
