package bench

import (
	"math"
	"testing"
	"time"
)

// sample builds a completed request: started at start seconds of wall time, lasting 1 s.
func sample(start float64, inst string, prompt, cached int, ttft float64, decision string) Sample {
	return Sample{Start: time.Duration(start * float64(time.Second)), Latency: time.Second,
		TTFT: time.Duration(ttft * float64(time.Second)), Status: 200, Instance: inst, Decision: decision,
		PromptTokens: prompt, CachedTokens: cached}
}

func TestAnalyze(t *testing.T) {
	var s []Sample
	// 0..9 s: engine-0 warm (80% hit), engine-1 cold (0%).
	for i := 0; i < 10; i++ {
		s = append(s, sample(float64(i), "engine-0", 100, 80, 0.1, "cache_hit"))
	}
	// engine-2 joins at 10 s; the fleet dips, then engine-2 warms up at its 3rd request (~13 s).
	for i := 10; i < 20; i++ {
		s = append(s, sample(float64(i), "engine-0", 100, 80, 0.1, "cache_hit"))
		c := 0
		if i >= 12 {
			c = 90
		}
		s = append(s, sample(float64(i)+0.5, "engine-2", 100, c, 0.5, "overflow"))
	}
	s = append(s, Sample{ID: 99, Err: "HTTP 503: boom", Status: 503, Instance: "engine-1"})
	d := runData{
		Policy: PolicyKVAware, Samples: s, Wall: 21 * time.Second, TimeScale: 0.5,
		Engines: CacheCounters{Queries: 3000, Hits: 2100}, Joined: map[string]time.Duration{"engine-2": 10 * time.Second},
		JoinAt: 10 * time.Second,
		Router: RouterMetrics{RoutingP50: 0.0002, RoutingP99: 0.001, RoutingCount: 30},
	}
	r := analyze(d, 0.8)
	if r.Requests != 31 || r.Completed != 30 || r.Errors != 1 || len(r.FirstErrors) != 1 {
		t.Fatalf("counts: %+v", r)
	}
	if r.HitRate != 0.7 || math.Abs(float64(r.OracleFraction)-0.875) > 1e-12 {
		t.Fatalf("hit rate %v of oracle %v", r.HitRate, r.OracleFraction)
	}
	// TTFT in simulated time: wall / 0.5.
	if r.TTFTP50S != 0.2 || r.TTFTP99S != 1 {
		t.Fatalf("ttft p50 %v p99 %v", r.TTFTP50S, r.TTFTP99S)
	}
	// 30 completed over 0..20.5 s wall = 41 s simulated; no load end: the same figure.
	if math.Abs(float64(r.ThroughputRPS)-30/41.0) > 1e-9 || r.ThroughputRPS != r.MakespanThroughputRPS {
		t.Fatalf("throughput %v makespan %v", r.ThroughputRPS, r.MakespanThroughputRPS)
	}
	// Full load until 11 s wall: only the completions ended by then count.
	d.LoadEnd = 11 * time.Second
	r2 := analyze(d, 0.8)
	n := 0
	for _, x := range s {
		if x.OK() && x.Start+x.Latency <= d.LoadEnd {
			n++
		}
	}
	if want := float64(n) / 22; math.Abs(float64(r2.ThroughputRPS)-want) > 1e-9 || r2.MakespanThroughputRPS != r.MakespanThroughputRPS {
		t.Fatalf("full-load throughput %v, want %v (%d completions in 22 simulated s)", r2.ThroughputRPS, want, n)
	}
	if r.OverflowRatio != Float(10.0/31) && r.OverflowRatio != Float(10.0/30) {
		t.Fatalf("overflow ratio %v", r.OverflowRatio)
	}
	if r.RoutingOverheadP99S != 0.001 || r.RoutingSamples != 30 {
		t.Fatalf("routing %v", r.RoutingOverheadP99S)
	}
	if !r.HitRateDip.Valid() || r.HitRateDip <= 0.2 {
		t.Fatalf("dip %v: the fleet should dip when engine-2 joins cold", r.HitRateDip)
	}
	var e2 *InstanceWarmup
	for i := range r.Instances {
		if r.Instances[i].Instance == "engine-2" {
			e2 = &r.Instances[i]
		}
	}
	if e2 == nil || e2.JoinedS != 20 || e2.Requests != 10 || !e2.WarmupS.Valid() {
		t.Fatalf("engine-2 warm-up: %+v", e2)
	}
	// Its rolling rate reaches the fleet's within a few of its requests (simulated seconds).
	if w := float64(e2.WarmupS); w < 4 || w > 12 {
		t.Fatalf("engine-2 warm-up %v s, want a few simulated seconds after joining", w)
	}
	if r.WarmupS != e2.WarmupS {
		t.Fatalf("policy warm-up %v should be the joined instance's %v", r.WarmupS, e2.WarmupS)
	}
	if len(r.HitRateOverTime) == 0 || len(r.TTFTCDF) == 0 || len(e2.Curve) == 0 {
		t.Fatal("series missing")
	}
}

func TestAnalyzeNothingMeasured(t *testing.T) {
	r := analyze(runData{Policy: "random", TimeScale: 1, Samples: []Sample{{Err: "not sent"}},
		Router: RouterMetrics{RoutingP50: math.NaN(), RoutingP99: math.NaN()}}, 0)
	for name, f := range map[string]Float{"hit": r.HitRate, "p50": r.TTFTP50S, "tput": r.ThroughputRPS, "routing": r.RoutingOverheadP50S, "warmup": r.WarmupS} {
		if f.Valid() {
			t.Errorf("%s = %v, want not measured (NaN → null)", name, f)
		}
	}
}

func TestCombineRuns(t *testing.T) {
	mk := func(p50, tput float64, errs int) PolicyResult {
		return PolicyResult{Policy: "kv-aware", Runs: 1, TTFTP50S: Float(p50), ThroughputRPS: Float(tput), HitRate: 0.5,
			WarmupS: Float(math.NaN()), Requests: 10, Completed: 10 - errs, Errors: errs, Decisions: map[string]int{"cache_hit": 10},
			TTFTCDF: []CDFPoint{{p50, 1}}}
	}
	one := mk(1, 1, 0)
	if got := combineRuns([]PolicyResult{one}); got.Runs != 1 || got.Range != nil {
		t.Fatalf("one run must pass through: %+v", got)
	}
	got := combineRuns([]PolicyResult{mk(3, 10, 0), mk(1, 30, 1), mk(2, 20, 0)})
	if got.Runs != 3 || got.TTFTP50S != 2 || got.ThroughputRPS != 20 || got.HitRate != 0.5 {
		t.Fatalf("medians: %+v", got)
	}
	if r := got.Range["ttft_p50_s"]; r != [2]Float{1, 3} {
		t.Fatalf("range %v", r)
	}
	if got.WarmupS.Valid() {
		t.Fatal("a figure no run measured stays unmeasured")
	}
	if got.Requests != 30 || got.Errors != 1 || got.Completed != 29 || got.Decisions["cache_hit"] != 30 {
		t.Fatalf("counts: %+v", got)
	}
	if got.TTFTCDF[0].X != 2 {
		t.Fatalf("series should come from the median run, got CDF %v", got.TTFTCDF)
	}
}
