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

// TestQuick is `kvroute bench --quick`: the shared-prefix ordering on the default profile.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("the quick benchmark takes up to 2 minutes; run without -short (make test-long)")
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
