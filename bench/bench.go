package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/tokenizer"
)

// ErrConfig is returned for an invalid benchmark configuration.
var ErrConfig = errors.New("bench: invalid config")

// Config configures a benchmark run. Zero numeric workload fields keep each workload's
// default (DefaultWorkload); simulated quantities are in the engines' simulated time.
type Config struct {
	// Workloads to run, in order (shared-prefix, multiturn, scale-out, hot-prefix, trace).
	Workloads []string
	// Policies to compare on each workload (random, least-request, prefix-hash, kv-aware).
	Policies []string
	// TraceFile is the JSONL file of the trace workload.
	TraceFile string
	// ModelDir loads the tokenizer from a model directory; "" uses the embedded default.
	ModelDir string
	Seed     uint64

	// Requests per workload (0 = the workload's default).
	Requests int
	// QPS > 0 runs open-loop with Poisson arrivals at QPS requests per simulated second;
	// otherwise Concurrency clients run closed-loop.
	QPS         float64
	Concurrency int
	// Engines overrides the workload's initial fleet size (0 = default).
	Engines int
	// Documents, DocTokens, QuestionTokens override the document workloads' shape.
	Documents, DocTokens, QuestionTokens int

	// Profile is the simulator profile; NumGPUBlocks overrides its KV capacity (0 = the
	// profile's); TimeScale is wall seconds per simulated second.
	Profile      string
	NumGPUBlocks int
	TimeScale    float64
	// ConcurrencyThreshold is the router's in-flight threshold for prefix-hash and kv-aware
	// (0 = the router's default).
	ConcurrencyThreshold int
	// PrewarmPrefixes sets the router's PrewarmPrefixes under every policy (0 = off): a
	// joining engine is sent the hottest prefixes before it takes traffic. The router
	// tracks prefixes only where it has the prompts' token ids, i.e. under kv-aware.
	PrewarmPrefixes int
	// RequestTimeout bounds one request (wall time).
	RequestTimeout time.Duration
	// Repeat runs each policy this many times (interleaved) and reports the median of
	// each figure with its range (0 or 1 = once).
	Repeat int

	// Quick asserts kv-aware ≥ prefix-hash ≥ least-request on shared-prefix hit rate.
	Quick bool
	// Progress receives the progress bars (stderr); nil for none.
	Progress io.Writer
	// Command is recorded in the report.
	Command string
}

// Bench defaults. The KV capacity is scaled down from the profile's so that a run of a few
// hundred requests reaches the regime of a long production run: the documents' working
// set is larger than one engine's cache and smaller than the fleet's.
const (
	DefaultProfile              = "llama-3.1-70b-h100-tp8"
	DefaultNumGPUBlocks         = 4096
	DefaultTimeScale            = 0.5
	DefaultConcurrency          = 32
	DefaultConcurrencyThreshold = 8
	DefaultDocuments            = 32
)

// DefaultConfig returns the default run: every generated workload, every policy.
func DefaultConfig() Config {
	return Config{
		Workloads: append([]string(nil), Workloads...), Policies: append([]string(nil), Policies...),
		Seed: 1, Concurrency: DefaultConcurrency, Documents: DefaultDocuments,
		Profile: DefaultProfile, NumGPUBlocks: DefaultNumGPUBlocks, TimeScale: DefaultTimeScale,
		ConcurrencyThreshold: DefaultConcurrencyThreshold, RequestTimeout: 10 * time.Minute,
	}
}

// QuickConfig returns the `--quick` run (≤ 2 minutes on a 2-core machine): the default
// shared-prefix workload, unchanged, under the three policies of the ordering assertion,
// at time scale 0.25.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Quick = true
	c.Workloads = []string{WorkloadSharedPrefix}
	c.Policies = []string{PolicyLeastRequest, PolicyPrefixHash, PolicyKVAware}
	c.TimeScale = 0.25
	return c
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(f, a...)) }
	if len(c.Workloads) == 0 {
		return bad("no workloads")
	}
	for _, w := range c.Workloads {
		if w == WorkloadTrace {
			if c.TraceFile == "" {
				return bad("workload trace needs a trace file")
			}
			continue
		}
		if _, err := DefaultWorkload(w); err != nil {
			return bad("%v", err)
		}
	}
	if len(c.Policies) == 0 {
		return bad("no policies")
	}
	for _, p := range c.Policies {
		known := false
		for _, k := range Policies {
			known = known || p == k
		}
		if !known {
			return bad("unknown policy %q (want %s)", p, strings.Join(Policies, ", "))
		}
	}
	switch {
	case c.TimeScale <= 0 || c.TimeScale > 100:
		return bad("time scale %v: want in (0, 100]", c.TimeScale)
	case c.QPS < 0:
		return bad("qps %v: want ≥ 0", c.QPS)
	case c.QPS == 0 && c.Concurrency < 1:
		return bad("give --qps (open loop) or --concurrency ≥ 1 (closed loop)")
	case c.Repeat < 0 || c.Repeat > 100:
		return bad("repeat %d: want 0..100", c.Repeat)
	case c.Requests < 0 || c.Engines < 0 || c.Documents < 0 || c.DocTokens < 0 || c.QuestionTokens < 0 || c.NumGPUBlocks < 0:
		return bad("counts must be ≥ 0")
	case c.PrewarmPrefixes < 0 || c.PrewarmPrefixes > 4096:
		return bad("prewarm prefixes %d: want 0 (off) .. 4096", c.PrewarmPrefixes)
	case c.ConcurrencyThreshold < 0 || c.ConcurrencyThreshold > 1024:
		return bad("concurrency threshold %d: want 0 (router default) or 1..1024", c.ConcurrencyThreshold)
	case c.Profile == "":
		return bad("no simulator profile")
	}
	return nil
}

// Bench runs benchmarks. It is not safe for concurrent Runs.
type Bench struct {
	cfg Config
	log *slog.Logger
	reg prometheus.Registerer
	tok *tokenizer.Model
	txt *Text

	requests *prometheus.CounterVec
}

// New validates cfg, loads the tokenizer and calibrates the text generator with it. reg
// receives the benchmark's own counters (kvroute_bench_requests_total); log nil discards.
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Bench, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var (
		tok *tokenizer.Model
		err error
	)
	if cfg.ModelDir != "" {
		tok, err = tokenizer.Load(cfg.ModelDir)
	} else {
		tok, err = tokenizer.Default()
	}
	if err != nil {
		return nil, fmt.Errorf("bench: tokenizer: %w", err)
	}
	txt := NewText()
	if err := txt.Calibrate(func(s string) (int, error) {
		ids, err := tok.Encode(s, false)
		return len(ids), err
	}); err != nil {
		return nil, err
	}
	b := &Bench{cfg: cfg, log: log, reg: reg, tok: tok, txt: txt,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_bench_requests_total", Help: "Requests the benchmark completed, by workload, policy and outcome (ok, error).",
		}, []string{"workload", "policy", "outcome"})}
	if err := reg.Register(b.requests); err != nil {
		return nil, fmt.Errorf("bench: register metrics: %w", err)
	}
	return b, nil
}

// TokensPerWord is the calibrated ratio of the text generator.
func (b *Bench) TokensPerWord() float64 { return b.txt.TokensPerWord }

// Trace builds the named workload's trace from the config.
func (b *Bench) Trace(name string) (*Trace, error) {
	c := b.cfg
	if name == WorkloadTrace {
		f, err := os.Open(c.TraceFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTrace, err)
		}
		defer f.Close()
		engines := c.Engines
		if engines == 0 {
			engines = 7
		}
		return ReadTrace(f, engines)
	}
	wc, err := DefaultWorkload(name)
	if err != nil {
		return nil, err
	}
	wc.Seed = c.Seed
	if c.QPS > 0 {
		wc.QPS = c.QPS
	}
	if c.Requests > 0 {
		wc.Requests = c.Requests
	}
	if c.Engines > 0 {
		wc.Engines = c.Engines
	}
	if wc.Documents > 0 {
		if c.Documents > 0 {
			wc.Documents = c.Documents
		}
		if c.DocTokens > 0 {
			wc.DocTokens = c.DocTokens
		}
		if c.QuestionTokens > 0 {
			wc.QuestionTokens = c.QuestionTokens
		}
	}
	return Generate(wc, b.txt)
}

// Run runs every workload under every policy and returns the report. With Quick, it
// also returns an error wrapping ErrOrdering when the shared-prefix ordering fails (the
// report is returned with it).
func (b *Bench) Run(ctx context.Context) (*Report, error) {
	rep := &Report{
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Machine: machine(), Command: b.cfg.Command,
		TimeScale: b.cfg.TimeScale, Profile: b.cfg.Profile, Seed: b.cfg.Seed, PrewarmPrefixes: b.cfg.PrewarmPrefixes,
	}
	for _, name := range b.cfg.Workloads {
		wr, err := b.runWorkload(ctx, name)
		if err != nil {
			return rep, err
		}
		rep.Workloads = append(rep.Workloads, *wr)
	}
	if b.cfg.Quick {
		for i := range rep.Workloads {
			if rep.Workloads[i].Name == WorkloadSharedPrefix {
				if err := CheckOrdering(&rep.Workloads[i]); err != nil {
					return rep, err
				}
			}
		}
	}
	return rep, nil
}

func (b *Bench) runWorkload(ctx context.Context, name string) (*WorkloadResult, error) {
	tr, err := b.Trace(name)
	if err != nil {
		return nil, err
	}
	prompts, err := TracePrompts(ctx, b.tok, tr)
	if err != nil {
		return nil, err
	}
	oracle := Oracle(prompts, 16)
	mode := fmt.Sprintf("closed loop, %d clients", b.cfg.Concurrency)
	if b.cfg.QPS > 0 || name == WorkloadTrace {
		mode = "open loop, Poisson arrivals"
		if name == WorkloadTrace {
			mode = "open loop, trace timestamps"
		}
	}
	wr := &WorkloadResult{Name: name, OracleHitRate: Float(oracle.HitRate()), Requests: len(tr.Requests),
		Engines: tr.Engines, Joins: tr.Joins, Mode: mode, PromptTokens: oracle.QueryTokens}
	b.log.Info("workload", "name", name, "requests", len(tr.Requests), "oracle_hit_rate", oracle.HitRate())
	repeat := max(b.cfg.Repeat, 1)
	runs := make([][]PolicyResult, len(b.cfg.Policies))
	// Repetitions interleave the policies, so slow phases of a noisy machine fall on all.
	for r := 0; r < repeat; r++ {
		for i, p := range b.cfg.Policies {
			pr, err := b.runPolicy(ctx, tr, p, oracle.HitRate())
			if err != nil {
				return nil, fmt.Errorf("bench: %s under %s: %w", name, p, err)
			}
			runs[i] = append(runs[i], *pr)
		}
	}
	for i := range b.cfg.Policies {
		wr.Policies = append(wr.Policies, combineRuns(runs[i]))
	}
	wr.Targets = CheckTargets(wr)
	return wr, nil
}

func (b *Bench) runPolicy(ctx context.Context, tr *Trace, policy string, oracle float64) (*PolicyResult, error) {
	st, err := startStack(ctx, &b.cfg, policy, tr.Engines, b.tok, b.log)
	if err != nil {
		return nil, err
	}
	defer st.close()
	conc := b.cfg.Concurrency
	if b.cfg.QPS > 0 || tr.Workload == WorkloadTrace {
		conc = 0
	}
	prog := NewProgress(b.cfg.Progress, tr.Workload+" "+policy, len(tr.Requests))
	joins := map[int]int{}
	for _, j := range tr.Joins {
		joins[j.AfterRequests] += j.Engines
	}
	var runStart time.Time
	var joinAt time.Duration
	d := &Driver{
		BaseURL: st.url, TimeScale: b.cfg.TimeScale, Concurrency: conc, RequestTimeout: b.cfg.RequestTimeout, Progress: prog,
		Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024, DisableCompression: true}},
		OnDispatch: func(n int) {
			if k, ok := joins[n]; ok {
				at := time.Since(runStart)
				if joinAt == 0 {
					joinAt = at
				}
				st.join(ctx, k, at)
			}
		},
	}
	runStart = time.Now()
	rr, err := d.Run(ctx, tr)
	prog.Finish()
	if err != nil {
		return nil, err
	}
	samples := rr.Samples
	if err := st.joinError(); err != nil {
		return nil, err
	}
	counters, err := st.counters(ctx)
	if err != nil {
		return nil, err
	}
	rm, err := ReadRouterMetrics(st.reg)
	if err != nil {
		return nil, err
	}
	res := analyze(runData{Policy: policy, Samples: samples, Wall: rr.Wall, LoadEnd: rr.LoadEnd, TimeScale: b.cfg.TimeScale,
		Engines: counters, Router: rm, Joined: st.joinOffsets(), JoinAt: joinAt}, oracle)
	for i := range res.Instances {
		for _, in := range st.fleet.Router().Stats().Instances {
			if in.ID == res.Instances[i].Instance && in.Warm {
				res.Instances[i].IndexWarmupS = Float(in.WarmupSeconds / b.cfg.TimeScale)
			}
		}
	}
	for _, s := range samples {
		outcome := "ok"
		if !s.OK() {
			outcome = "error"
		}
		b.requests.WithLabelValues(tr.Workload, policy, outcome).Inc()
	}
	return &res, nil
}

// machine describes the host: CPU model and count.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	if model == "" {
		model = runtime.GOARCH
	}
	return fmt.Sprintf("%d × %s, %s", runtime.NumCPU(), model, runtime.Version())
}
