package main

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// simFlags maps `kvroute sim` flags to sim.Config. Engine flags start from the chosen
// profile; a flag given explicitly (or by env / config file) overrides it.
type simFlags struct {
	listen, logLevel, logFormat string
	modelDir, profile           string
	cfg                         sim.Config
}

func newSimCmd() *cobra.Command { return simCommand(&simFlags{cfg: sim.DefaultConfig()}) }

// simCommand builds the command around f, which receives the parsed flags.
func simCommand(f *simFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "run a simulated vLLM engine (OpenAI API, prefix cache, KV events; no GPU)",
		Long: `sim runs a vLLM-compatible engine simulator: the OpenAI HTTP API, /tokenize, /metrics
with vLLM's names, a real prefix cache with LRU eviction, a continuous-batching step loop
with a calibrated cost model, and vLLM's ZMQ KV-event stream with a replay socket.

Engine settings come from --profile (` + fmt.Sprint(sim.Profiles()) + `); every engine flag
given explicitly overrides the profile. --time-scale 0.05 runs 20× faster than real time
with the same ratios. Faults can be changed at run time with POST /admin/faults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	fs := cmd.Flags()
	c := &f.cfg
	fs.StringVar(&f.listen, "listen", ":8000", "HTTP address, HOST:PORT (vLLM's default port is 8000)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.Model, "model", c.Model, "served model name")
	fs.StringVar(&f.modelDir, "model-dir", "", "directory with tokenizer.json and tokenizer_config.json (default: the embedded Qwen3 tokenizer)")
	fs.StringSliceVar(&c.LoRAAdapters, "lora-adapters", nil, "LoRA adapter names served besides the model (comma-separated)")
	fs.StringVar(&f.profile, "profile", "tiny", "engine profile: "+fmt.Sprint(sim.Profiles()))
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "KV-cache block size, tokens")
	fs.IntVar(&c.NumGPUBlocks, "num-gpu-blocks", c.NumGPUBlocks, "KV-cache capacity, blocks")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "maximum running requests")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "token budget per scheduler step, tokens (prefill is chunked to fit)")
	fs.IntVar(&c.MaxModelLen, "max-model-len", c.MaxModelLen, "maximum prompt + max_tokens, tokens")
	fs.DurationVar(&c.Cost.StepBase, "step-base", c.Cost.StepBase, "cost model: fixed time per step")
	fs.DurationVar(&c.Cost.PerPrefillToken, "step-per-prefill-token", c.Cost.PerPrefillToken, "cost model: time per prefill token")
	fs.DurationVar(&c.Cost.PerDecodeSeq, "step-per-decode-seq", c.Cost.PerDecodeSeq, "cost model: time per decoding sequence")
	fs.DurationVar(&c.Cost.PerContextToken, "step-per-context-token", c.Cost.PerContextToken, "cost model: time per context token attended")
	fs.Float64Var(&c.TimeScale, "time-scale", c.TimeScale, "multiplier of every sleep (1 = real time, 0.05 = 20× faster, 0 = no sleep)")
	fs.IntVar(&c.DefaultMaxTokens, "default-max-tokens", c.DefaultMaxTokens, "output length of a request without max_tokens, tokens")
	fs.BoolVar(&c.OutputLenUniform, "output-len-uniform", false, "draw each output length uniformly from [1, max_tokens]")
	fs.Int64Var(&c.Seed, "seed", 0, "random seed for output lengths and fault draws (0 = time-based)")
	fs.BoolVar(&c.KVEventsEnabled, "kv-events", true, "publish KV-cache events on ZMQ")
	fs.StringVar(&c.KVEventsEndpoint, "kv-events-endpoint", "tcp://*:5557", "ZMQ PUB endpoint; binds when it has '*' (a '*' port = any free port), connects otherwise, like vLLM")
	fs.StringVar(&c.KVEventsReplayEndpoint, "kv-events-replay-endpoint", "tcp://*:5558", "ZMQ ROUTER replay endpoint (empty = no replay)")
	fs.StringVar(&c.KVEventsTopic, "kv-events-topic", c.KVEventsTopic, "topic frame of every event message")
	fs.StringVar(&c.KVEventsFormat, "kv-events-format", c.KVEventsFormat, "event form: map (vLLM ≥ 0.24) or array (legacy)")
	fs.IntVar(&c.KVEventsBufferSteps, "kv-events-buffer-steps", c.KVEventsBufferSteps, "batches kept for replay")
	fs.IntVar(&c.KVEventsHWM, "kv-events-hwm", c.KVEventsHWM, "PUB high-water mark, messages (0 = unbounded)")
	fs.IntVar(&c.DataParallelRank, "data-parallel-rank", 0, "data-parallel rank written into every batch")
	fs.StringVar(&c.HashSeed, "hash-seed", "", "block-hash seed like PYTHONHASHSEED (empty = random per start, as vLLM)")
	fs.Float64Var(&c.Faults.DropEventsFraction, "fault-drop-events", 0, "fault: fraction of event batches dropped (0..1)")
	fs.BoolVar(&c.Faults.StopEvents, "fault-stop-events", false, "fault: publish no events")
	fs.Float64Var(&c.Faults.SlowFactor, "fault-slow-factor", 1, "fault: multiply every step's duration")
	fs.Float64Var(&c.Faults.FailFraction, "fault-fail-fraction", 0, "fault: fraction of requests failed (0..1)")
	fs.IntVar(&c.Faults.FailStatus, "fault-fail-status", 500, "fault: HTTP status of failed requests (500 or 503)")
	fs.Float64Var(&c.Faults.CutStreamFraction, "fault-cut-streams", 0, "fault: fraction of streams cut midway (0..1)")
	return cmd
}

// engineFlags are the flags a profile sets.
var engineFlags = map[string]func(c *sim.Config, p sim.Profile){
	"block-size":             func(c *sim.Config, p sim.Profile) { c.BlockSize = p.BlockSize },
	"num-gpu-blocks":         func(c *sim.Config, p sim.Profile) { c.NumGPUBlocks = p.NumGPUBlocks },
	"max-num-seqs":           func(c *sim.Config, p sim.Profile) { c.MaxNumSeqs = p.MaxNumSeqs },
	"max-num-batched-tokens": func(c *sim.Config, p sim.Profile) { c.MaxNumBatchedTokens = p.MaxNumBatchedTokens },
	"max-model-len":          func(c *sim.Config, p sim.Profile) { c.MaxModelLen = p.MaxModelLen },
	"step-base":              func(c *sim.Config, p sim.Profile) { c.Cost.StepBase = p.Cost.StepBase },
	"step-per-prefill-token": func(c *sim.Config, p sim.Profile) { c.Cost.PerPrefillToken = p.Cost.PerPrefillToken },
	"step-per-decode-seq":    func(c *sim.Config, p sim.Profile) { c.Cost.PerDecodeSeq = p.Cost.PerDecodeSeq },
	"step-per-context-token": func(c *sim.Config, p sim.Profile) { c.Cost.PerContextToken = p.Cost.PerContextToken },
}

// config resolves the profile under the explicitly set flags.
func (f *simFlags) config(cmd *cobra.Command) (sim.Config, error) {
	p, err := sim.LookupProfile(f.profile)
	if err != nil {
		return sim.Config{}, usageError{err}
	}
	cfg := f.cfg
	cfg.Profile = p.Name
	for name, set := range engineFlags {
		if !cmd.Flags().Changed(name) {
			set(&cfg, p)
		}
	}
	cfg.ListenAddr = f.listen
	if err := cfg.Validate(); err != nil {
		return sim.Config{}, usageError{err}
	}
	return cfg, nil
}

func (f *simFlags) run(cmd *cobra.Command) error {
	log, err := newLogger(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	cfg, err := f.config(cmd)
	if err != nil {
		return err
	}
	var tok *tokenizer.Model
	if f.modelDir != "" {
		tok, err = tokenizer.Load(f.modelDir)
	} else {
		tok, err = tokenizer.Default()
		if err == nil && cfg.Model != sim.DefaultModel {
			log.Warn("no --model-dir: tokenizing with the embedded Qwen3 tokenizer", "model", cfg.Model)
		}
	}
	if err != nil {
		return fmt.Errorf("sim: tokenizer: %w", err)
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	srv, err := sim.New(cfg, tok, prometheus.NewRegistry(), log)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sim serving %s at %s (events %s, replay %s)\n", cfg.Model, srv.URL(), srv.EventsEndpoint(), srv.ReplayEndpoint())
	<-ctx.Done()
	log.Info("shutting down")
	done := make(chan error, 1)
	go func() { done <- srv.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		return fmt.Errorf("sim: shutdown timed out")
	}
}
