package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/bench"
)

// benchFlags map `kvroute bench` flags to bench.Config.
type benchFlags struct {
	workloads, policies                  []string
	trace, modelDir                      string
	seed                                 uint64
	requests, concurrency, engines       int
	qps                                  float64
	documents, docTokens, questionTokens int
	profile                              string
	numGPUBlocks                         int
	timeScale                            float64
	threshold, prewarm                   int
	requestTimeout                       time.Duration
	repeat                               int
	quick, noProgress                    bool
	jsonOut, mdOut, htmlOut              string
	logLevel, logFormat                  string
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	d := bench.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark every routing policy side by side on the real stack with simulated engines",
		Long: `bench runs, in this process, an embedded NATS server, simulated vLLM engines with their
agents, the index and the router over real HTTP — a fresh stack per policy, the same seeded
trace for each — and reports TTFT (simulated time), the engines' own prefix-cache hit rate
against the oracle bound, throughput, overflow ratio, routing overhead (real time) and
warm-up, as a markdown table (stdout or --markdown), JSON (--json) and HTML charts (--html).

Workloads: shared-prefix, multiturn, scale-out, hot-prefix, trace (--trace FILE: JSONL lines
{"timestamp": seconds, "body": {OpenAI request}, "session": optional}); "all" = the four
generated ones. --quick runs a short shared-prefix comparison (≤ 2 minutes) and exits
non-zero unless kv-aware ≥ prefix-hash ≥ least-request on hit rate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, &f)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&f.workloads, "workload", []string{"all"}, "workloads, comma-separated: shared-prefix, multiturn, scale-out, hot-prefix, trace, or all")
	fs.StringSliceVar(&f.policies, "policies", d.Policies, "policies, comma-separated: random, least-request, prefix-hash, kv-aware")
	fs.StringVar(&f.trace, "trace", "", "JSONL trace file for the trace workload")
	fs.StringVar(&f.modelDir, "model-dir", "", "tokenizer model directory (default: the embedded Qwen3 tokenizer)")
	fs.Uint64Var(&f.seed, "seed", d.Seed, "seed of the generated workloads")
	fs.IntVar(&f.requests, "requests", 0, "requests per workload (0 = the workload's default, 400)")
	fs.Float64Var(&f.qps, "qps", 0, "open loop: Poisson arrivals at this many requests per simulated second (0 = closed loop)")
	fs.IntVar(&f.concurrency, "concurrency", d.Concurrency, "closed loop: concurrent clients")
	fs.IntVar(&f.engines, "engines", 0, "initial engines (0 = the workload's default: 7, scale-out 4)")
	fs.IntVar(&f.documents, "documents", d.Documents, "shared prefixes (documents) of the document workloads")
	fs.IntVar(&f.docTokens, "doc-tokens", 0, "tokens per document (0 = 8000)")
	fs.IntVar(&f.questionTokens, "question-tokens", 0, "tokens per question (0 = 200)")
	fs.StringVar(&f.profile, "profile", d.Profile, "simulator profile")
	fs.IntVar(&f.numGPUBlocks, "num-gpu-blocks", d.NumGPUBlocks, "KV-cache blocks per engine (0 = the profile's)")
	fs.Float64Var(&f.timeScale, "time-scale", d.TimeScale, "wall seconds per simulated second (0.5 = twice as fast as real time)")
	fs.IntVar(&f.threshold, "concurrency-threshold", d.ConcurrencyThreshold, "router in-flight threshold per instance before overflow (1..1024; 0 = router default)")
	fs.IntVar(&f.prewarm, "prewarm-prefixes", 0, "router pre-warming under every policy: hottest prefixes replayed to a joining engine before it takes traffic (0 = off; effective only where the router tracks token ids, i.e. kv-aware)")
	fs.DurationVar(&f.requestTimeout, "request-timeout", d.RequestTimeout, "timeout of one request, wall time")
	fs.IntVar(&f.repeat, "repeat", 1, "runs per policy (interleaved); figures are the medians, ranges in the JSON")
	fs.BoolVar(&f.quick, "quick", false, "short shared-prefix run (≤ 2 min) asserting kv-aware ≥ prefix-hash ≥ least-request on hit rate")
	fs.BoolVar(&f.noProgress, "no-progress", false, "no progress bar on stderr")
	fs.StringVar(&f.jsonOut, "json", "", "write the JSON report to FILE")
	fs.StringVar(&f.mdOut, "markdown", "", "write the markdown report to FILE (default: stdout)")
	fs.StringVar(&f.htmlOut, "html", "", "write the charts as one self-contained HTML file")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

func runBench(cmd *cobra.Command, f *benchFlags) error {
	log, err := newLogger(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	cfg := bench.DefaultConfig()
	if f.quick {
		cfg = bench.QuickConfig()
	}
	set := func(name string) bool { return cmd.Flags().Changed(name) || !f.quick }
	if set("workload") {
		cfg.Workloads = nil
		for _, w := range f.workloads {
			if w == "all" {
				cfg.Workloads = append(cfg.Workloads, bench.Workloads...)
			} else {
				cfg.Workloads = append(cfg.Workloads, w)
			}
		}
	}
	if set("policies") {
		cfg.Policies = f.policies
	}
	cfg.TraceFile, cfg.ModelDir, cfg.Seed = f.trace, f.modelDir, f.seed
	if set("requests") {
		cfg.Requests = f.requests
	}
	if set("concurrency") {
		cfg.Concurrency = f.concurrency
	}
	if set("documents") {
		cfg.Documents = f.documents
	}
	if set("num-gpu-blocks") {
		cfg.NumGPUBlocks = f.numGPUBlocks
	}
	if set("time-scale") {
		cfg.TimeScale = f.timeScale
	}
	cfg.QPS, cfg.Engines, cfg.DocTokens, cfg.QuestionTokens = f.qps, f.engines, f.docTokens, f.questionTokens
	cfg.Profile, cfg.ConcurrencyThreshold, cfg.RequestTimeout, cfg.Repeat = f.profile, f.threshold, f.requestTimeout, f.repeat
	cfg.PrewarmPrefixes = f.prewarm
	if !f.noProgress {
		cfg.Progress = os.Stderr
	}
	cfg.Command = "kvroute " + strings.Join(os.Args[1:], " ")
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	b, err := bench.New(cfg, prometheus.NewRegistry(), log)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	rep, runErr := b.Run(ctx)
	if rep != nil && len(rep.Workloads) > 0 {
		if err := writeReports(rep, f); err != nil {
			return err
		}
	}
	return runErr
}

func writeReports(rep *bench.Report, f *benchFlags) error {
	write := func(path string, w func(*os.File) error) error {
		file, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := w(file); err != nil {
			file.Close()
			return err
		}
		return file.Close()
	}
	if f.mdOut == "" {
		if err := rep.WriteMarkdown(os.Stdout); err != nil {
			return err
		}
	} else if err := write(f.mdOut, func(o *os.File) error { return rep.WriteMarkdown(o) }); err != nil {
		return fmt.Errorf("--markdown: %w", err)
	}
	if f.jsonOut != "" {
		if err := write(f.jsonOut, func(o *os.File) error { return rep.WriteJSON(o) }); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if f.htmlOut != "" {
		if err := write(f.htmlOut, func(o *os.File) error { return rep.WriteHTML(o) }); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	return nil
}
