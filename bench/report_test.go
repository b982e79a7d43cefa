package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
)

func sampleReport() *Report {
	nan := Float(math.NaN())
	mk := func(p string, hit, p50, p90, tput Float) PolicyResult {
		return PolicyResult{Policy: p, HitRate: hit, OracleFraction: hit / 0.9, TTFTP50S: p50, TTFTP90S: p90, TTFTP99S: p90 * 2,
			ThroughputRPS: tput, OverflowRatio: 0.1, RoutingOverheadP50S: 0.0002, RoutingOverheadP99S: nan, WarmupS: nan,
			HitRateDip: nan, TTFTCDF: []CDFPoint{{0.1, 0.5}, {float64(p90), 1}}, HitRateOverTime: []Point{{1, hit}, {2, hit}},
			Instances: []InstanceWarmup{{Instance: "engine-0", Curve: []Point{{1, 0.5}}, WarmupS: nan, HitRate: 0.5}}}
	}
	w := WorkloadResult{Name: WorkloadSharedPrefix, OracleHitRate: 0.9, Requests: 10, Engines: 7, Mode: "closed loop",
		Policies: []PolicyResult{
			mk(PolicyLeastRequest, 0.3, 1.0, 2.0, 1.0),
			mk(PolicyPrefixHash, 0.7, 0.4, 1.5, 1.1),
			mk(PolicyKVAware, 0.88, 0.2, 0.9, 1.2),
		}}
	w.Targets = CheckTargets(&w)
	return &Report{Date: "2026-11-29", Machine: "test", TimeScale: 0.1, Profile: "tiny", Seed: 1, Workloads: []WorkloadResult{w}}
}

func TestReportJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	wls, ok := doc["workloads"].([]any)
	if !ok || len(wls) != 1 {
		t.Fatalf("workloads: %v", doc["workloads"])
	}
	wl := wls[0].(map[string]any)
	for _, k := range []string{"name", "oracle_hit_rate", "policies"} {
		if _, ok := wl[k]; !ok {
			t.Errorf("workload lacks %q", k)
		}
	}
	pols := wl["policies"].([]any)
	for _, p := range pols {
		pm := p.(map[string]any)
		for _, k := range []string{"policy", "hit_rate", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "throughput_rps",
			"overflow_ratio", "routing_overhead_p50_s", "routing_overhead_p99_s", "warmup_s"} {
			if _, ok := pm[k]; !ok {
				t.Errorf("policy lacks %q", k)
			}
		}
		if pm["warmup_s"] != nil || pm["routing_overhead_p99_s"] != nil {
			t.Errorf("unmeasured figures must be null, got %v and %v", pm["warmup_s"], pm["routing_overhead_p99_s"])
		}
		if _, isNum := pm["hit_rate"].(float64); !isNum {
			t.Errorf("hit_rate is %T, want a number", pm["hit_rate"])
		}
	}
	// Round trip: null comes back as not measured.
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Workloads[0].Policies[2].WarmupS.Valid() || back.Workloads[0].Policies[2].HitRate != 0.88 {
		t.Fatalf("round trip: %+v", back.Workloads[0].Policies[2])
	}
}

func TestTargetsAndOrdering(t *testing.T) {
	r := sampleReport()
	w := &r.Workloads[0]
	got := map[string]bool{}
	for _, tc := range w.Targets {
		got[tc.Target] = tc.Met
		if tc.Measured == "" {
			t.Errorf("%s: no measured figure", tc.Target)
		}
	}
	want := map[string]bool{
		"hit rate ≥ 95% of the oracle bound": true, // 0.88/0.9 = 0.978
		"hit rate above prefix-hash's":       true,
		"P90 TTFT below prefix-hash's":       true,
		"P50 TTFT ≤ 0.25× least-request's":   true, // 0.2
		"P90 TTFT ≤ 0.5× least-request's":    true, // 0.45
		"throughput ≥ 1.15× least-request's": true, // 1.2
	}
	for k, v := range want {
		if m, ok := got[k]; !ok || m != v {
			t.Errorf("target %q: met=%v present=%v, want met=%v", k, m, ok, v)
		}
	}
	if err := CheckOrdering(w); err != nil {
		t.Fatalf("ordering holds: %v", err)
	}
	w.Policies[1].HitRate = 0.2 // prefix-hash below least-request
	if err := CheckOrdering(w); !errors.Is(err, ErrOrdering) || !strings.Contains(err.Error(), "prefix-hash 0.200") {
		t.Fatalf("violated ordering: %v", err)
	}
	w.Policies = w.Policies[:2]
	if err := CheckOrdering(w); !errors.Is(err, ErrOrdering) {
		t.Fatalf("missing kv-aware: %v", err)
	}
}

func TestReportMarkdown(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteMarkdown(&buf); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{"## shared-prefix", "| kv-aware | 0.200 | 0.900 |", "Ratios against least-request", "Ratios against prefix-hash",
		"| kv-aware | 0.20× | 0.45×", "Targets for kv-aware", "n/a"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestReportHTMLSelfContained(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	h := buf.String()
	if n := strings.Count(h, "<svg"); n != 2+3 {
		t.Fatalf("%d charts, want CDF + hit rate + 3 warm-up charts", n)
	}
	if !strings.Contains(h, "<polyline") || !strings.Contains(h, "TTFT CDF") {
		t.Fatal("charts have no lines")
	}
	// No external assets: the only URL is the SVG namespace.
	for _, m := range regexp.MustCompile(`(?:src|href)=|https?://[^"]*`).FindAllString(h, -1) {
		if m != "http://www.w3.org/2000/svg" {
			t.Fatalf("external reference %q", m)
		}
	}
}
