package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no workloads":   func(c *Config) { c.Workloads = nil },
		"bad workload":   func(c *Config) { c.Workloads = []string{"nope"} },
		"trace no file":  func(c *Config) { c.Workloads = []string{WorkloadTrace} },
		"bad policy":     func(c *Config) { c.Policies = []string{"round-robin"} },
		"no policies":    func(c *Config) { c.Policies = nil },
		"time scale":     func(c *Config) { c.TimeScale = 0 },
		"no load":        func(c *Config) { c.Concurrency, c.QPS = 0, 0 },
		"threshold":      func(c *Config) { c.ConcurrencyThreshold = 2000 },
		"negative count": func(c *Config) { c.Requests = -1 },
		"prewarm":        func(c *Config) { c.PrewarmPrefixes = 5000 },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	for _, c := range []Config{DefaultConfig(), QuickConfig()} {
		if err := c.Validate(); err != nil {
			t.Fatalf("default config invalid: %v", err)
		}
	}
}

// TestStackSmoke runs every policy on a tiny shared-prefix trace through the whole stack:
// NATS, two simulated engines with agents, the index and the router.
func TestStackSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack once per policy; run without -short")
	}
	cfg := DefaultConfig()
	cfg.Workloads = []string{WorkloadSharedPrefix}
	cfg.Requests, cfg.Engines, cfg.Documents, cfg.DocTokens, cfg.Concurrency = 24, 2, 3, 400, 4
	cfg.Profile, cfg.NumGPUBlocks, cfg.TimeScale = "tiny", 0, 1
	reg := prometheus.NewRegistry()
	b, err := New(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := b.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := rep.Workloads[0]
	if len(w.Policies) != 4 || !w.OracleHitRate.Valid() || w.OracleHitRate <= 0.5 {
		t.Fatalf("workload result: %d policies, oracle %v", len(w.Policies), w.OracleHitRate)
	}
	for _, p := range w.Policies {
		if p.Errors != 0 || p.Completed != 24 {
			t.Fatalf("%s: %d errors, %d completed: %v", p.Policy, p.Errors, p.Completed, p.FirstErrors)
		}
		if !p.HitRate.Valid() || p.HitRate > w.OracleHitRate+1e-9 {
			t.Fatalf("%s: hit rate %v above the oracle bound %v", p.Policy, p.HitRate, w.OracleHitRate)
		}
		if !p.TTFTP50S.Valid() || !p.ThroughputRPS.Valid() || !p.RoutingOverheadP50S.Valid() || p.RoutingSamples < 24 {
			t.Fatalf("%s: figures missing: %+v", p.Policy, p)
		}
		if len(p.Decisions) == 0 || len(p.Instances) != 2 {
			t.Fatalf("%s: decisions %v, instances %d", p.Policy, p.Decisions, len(p.Instances))
		}
	}
	if got := testutil.ToFloat64(b.requests.WithLabelValues(WorkloadSharedPrefix, PolicyKVAware, "ok")); got != 24 {
		t.Fatalf("kvroute_bench_requests_total{kv-aware,ok} = %v", got)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil || !json.Valid(buf.Bytes()) {
		t.Fatalf("json: %v", err)
	}
}

// TestScaleOutPrewarm runs a small scale-out under kv-aware with router pre-warming: the
// engine that joins mid-run gets the hottest prefixes replayed before it takes traffic,
// and the run reports its join offset, its warm-up and the replays.
func TestScaleOutPrewarm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack and grows it mid-run; run without -short")
	}
	cfg := DefaultConfig()
	cfg.Workloads, cfg.Policies = []string{WorkloadScaleOut}, []string{PolicyKVAware}
	cfg.Requests, cfg.Engines, cfg.Documents, cfg.DocTokens, cfg.Concurrency = 60, 2, 4, 400, 4
	cfg.Profile, cfg.NumGPUBlocks, cfg.TimeScale, cfg.PrewarmPrefixes = "tiny", 0, 1, 4
	b, err := New(cfg, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := b.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.PrewarmPrefixes != 4 {
		t.Fatalf("report prewarm_prefixes %d", rep.PrewarmPrefixes)
	}
	w := rep.Workloads[0]
	if len(w.Joins) != 1 {
		t.Fatalf("joins %+v", w.Joins)
	}
	p := w.Policies[0]
	if p.Errors != 0 || p.Completed != 60 {
		t.Fatalf("%d errors, %d completed: %v", p.Errors, p.Completed, p.FirstErrors)
	}
	if p.PrewarmRequests["ok"] < 1 || !p.PrewarmS.Valid() || p.PrewarmS <= 0 {
		t.Fatalf("no pre-warming measured: replays %v, %v s", p.PrewarmRequests, p.PrewarmS)
	}
	wantJoined := 2 + w.Joins[0].Engines
	if len(p.Instances) != wantJoined {
		t.Fatalf("%d instances, want %d", len(p.Instances), wantJoined)
	}
	late := 0
	for _, in := range p.Instances {
		if in.JoinedS > 0 {
			late++
		}
	}
	if late != w.Joins[0].Engines {
		t.Fatalf("%d instances joined mid-run, want %d: %+v", late, w.Joins[0].Engines, p.Instances)
	}
	if !p.HitRate.Valid() || p.HitRate > w.OracleHitRate+1e-9 {
		t.Fatalf("hit rate %v, oracle %v", p.HitRate, w.OracleHitRate)
	}
}

// TestQuick is `kvroute bench --quick` as a test: the shared-prefix ordering on the default
// profile. `make test-long` already runs the CLI's --quick, so this runs only when
// KVROUTE_BENCH_QUICK=1 (to debug the quick run under go test).
func TestQuick(t *testing.T) {
	if testing.Short() || os.Getenv("KVROUTE_BENCH_QUICK") != "1" {
		t.Skip("set KVROUTE_BENCH_QUICK=1 (without -short) to run; make test-long runs `kvroute bench --quick` instead")
	}
	cfg := QuickConfig()
	if testing.Verbose() {
		cfg.Progress = os.Stderr
	}
	b, err := New(cfg, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.Run(context.Background())
	if rep != nil {
		var md bytes.Buffer
		_ = rep.WriteMarkdown(&md)
		t.Log("\n" + md.String())
	}
	if err != nil {
		t.Fatal(err)
	}
}
