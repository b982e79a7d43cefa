package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Policy names, as the router's --policy takes them.
const (
	PolicyRandom       = "random"
	PolicyLeastRequest = "least-request"
	PolicyPrefixHash   = "prefix-hash"
	PolicyKVAware      = "kv-aware"
)

// Policies lists every policy in report order.
var Policies = []string{PolicyRandom, PolicyLeastRequest, PolicyPrefixHash, PolicyKVAware}

// ErrOrdering is returned by CheckOrdering when the hit-rate ordering does not hold.
var ErrOrdering = errors.New("bench: hit-rate ordering violated")

// TargetCheck is one of the targets for kv-aware, checked against the measured figures.
type TargetCheck struct {
	Workload string `json:"workload"`
	Target   string `json:"target"`
	// Met is false when the target was missed or could not be measured (Measured says which).
	Met      bool   `json:"met"`
	Measured string `json:"measured"`
}

// CheckTargets evaluates the targets for kv-aware on w. Targets whose policies
// were not run are skipped.
func CheckTargets(w *WorkloadResult) []TargetCheck {
	kv := w.Policy(PolicyKVAware)
	if kv == nil {
		return nil
	}
	lr, ph := w.Policy(PolicyLeastRequest), w.Policy(PolicyPrefixHash)
	var out []TargetCheck
	add := func(target string, a, b Float, ok func(a, b float64) bool, format string) {
		tc := TargetCheck{Workload: w.Name, Target: target}
		if a.Valid() && b.Valid() {
			tc.Met = ok(float64(a), float64(b))
			tc.Measured = fmt.Sprintf(format, float64(a), float64(b))
		} else {
			tc.Measured = "not measured"
		}
		out = append(out, tc)
	}
	ratio := func(a, b Float) Float {
		if !a.Valid() || !b.Valid() || b == 0 {
			return Float(math.NaN())
		}
		return a / b
	}
	le := func(a, b float64) bool { return a <= b }
	lt := func(a, b float64) bool { return a < b }
	ge := func(a, b float64) bool { return a >= b }
	gt := func(a, b float64) bool { return a > b }
	switch w.Name {
	case WorkloadSharedPrefix:
		add("hit rate ≥ 95% of the oracle bound", kv.OracleFraction, 0.95, ge, "%.3f of oracle (goal ≥ %.2f)")
		if ph != nil {
			add("hit rate above prefix-hash's", kv.HitRate, ph.HitRate, gt, "%.3f vs %.3f")
			add("P90 TTFT below prefix-hash's", kv.TTFTP90S, ph.TTFTP90S, lt, "%.3f s vs %.3f s")
		}
		if lr != nil {
			add("P50 TTFT ≤ 0.25× least-request's", ratio(kv.TTFTP50S, lr.TTFTP50S), 0.25, le, "%.3f× (goal ≤ %.2f×)")
			add("P90 TTFT ≤ 0.5× least-request's", ratio(kv.TTFTP90S, lr.TTFTP90S), 0.5, le, "%.3f× (goal ≤ %.2f×)")
			add("throughput ≥ 1.15× least-request's", ratio(kv.ThroughputRPS, lr.ThroughputRPS), 1.15, ge, "%.3f× (goal ≥ %.2f×)")
		}
	case WorkloadMultiturn:
		if lr != nil {
			add("throughput ≥ 1.10× least-request's", ratio(kv.ThroughputRPS, lr.ThroughputRPS), 1.10, ge, "%.3f× (goal ≥ %.2f×)")
		}
	case WorkloadScaleOut:
		if ph != nil {
			add("hit-rate dip smaller than prefix-hash's", kv.HitRateDip, ph.HitRateDip, lt, "%.3f vs %.3f")
			add("warm-up shorter than prefix-hash's", kv.WarmupS, ph.WarmupS, lt, "%.2f s vs %.2f s")
		}
	case WorkloadHotPrefix:
		if ph != nil {
			add("P90 TTFT below prefix-hash's", kv.TTFTP90S, ph.TTFTP90S, lt, "%.3f s vs %.3f s")
		}
	}
	return out
}

// CheckOrdering verifies kv-aware ≥ prefix-hash ≥ least-request on hit rate (the --quick
// assertion); it returns nil when it holds and an error naming the figures otherwise.
func CheckOrdering(w *WorkloadResult) error {
	kv, ph, lr := w.Policy(PolicyKVAware), w.Policy(PolicyPrefixHash), w.Policy(PolicyLeastRequest)
	if kv == nil || ph == nil || lr == nil {
		return fmt.Errorf("%w: ordering needs kv-aware, prefix-hash and least-request", ErrOrdering)
	}
	if !kv.HitRate.Valid() || !ph.HitRate.Valid() || !lr.HitRate.Valid() {
		return fmt.Errorf("%w: a hit rate was not measured", ErrOrdering)
	}
	if kv.HitRate >= ph.HitRate && ph.HitRate >= lr.HitRate {
		return nil
	}
	return fmt.Errorf("%w: %s hit rate kv-aware %.3f, prefix-hash %.3f, least-request %.3f (want kv-aware ≥ prefix-hash ≥ least-request)",
		ErrOrdering, w.Name, float64(kv.HitRate), float64(ph.HitRate), float64(lr.HitRate))
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func fmtF(f Float, format string) string {
	if !f.Valid() {
		return "n/a"
	}
	return fmt.Sprintf(format, float64(f))
}

func fmtRatio(a, b Float) string {
	if !a.Valid() || !b.Valid() || b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", float64(a/b))
}

// WriteMarkdown writes one table per workload, the ratios against least-request and
// prefix-hash, and the target checks.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# kvroute bench — %s\n\n", r.Date)
	fmt.Fprintf(&b, "Machine: %s. Profile %s, time scale %g (TTFT, throughput and warm-up in simulated time; routing overhead in real time). Seed %d.",
		r.Machine, r.Profile, r.TimeScale, r.Seed)
	if r.PrewarmPrefixes > 0 {
		fmt.Fprintf(&b, " Router pre-warming: %d prefixes (effective where the router tracks token ids: kv-aware).", r.PrewarmPrefixes)
	}
	b.WriteString("\n\n")
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}
	for i := range r.Workloads {
		wl := &r.Workloads[i]
		fmt.Fprintf(&b, "## %s\n\n", wl.Name)
		joins := ""
		for _, j := range wl.Joins {
			joins += fmt.Sprintf(", +%d engines after %d requests", j.Engines, j.AfterRequests)
		}
		fmt.Fprintf(&b, "%d requests (%d prompt tokens), %d engines%s, %s. Oracle hit rate (unbounded cache): %s.\n\n",
			wl.Requests, wl.PromptTokens, wl.Engines, joins, wl.Mode, fmtF(wl.OracleHitRate, "%.3f"))
		if len(wl.Policies) > 0 && wl.Policies[0].Runs > 1 {
			fmt.Fprintf(&b, "Each figure is the median of %d runs per policy (ranges in the JSON); errors are summed.\n\n", wl.Policies[0].Runs)
		}
		b.WriteString("| policy | TTFT p50 (s) | TTFT p90 (s) | TTFT p99 (s) | hit rate | of oracle | throughput (req/s) | overflow | routing p50 / p99 (ms) | warm-up (s) | hit-rate dip | errors |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range wl.Policies {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %d/%d |\n",
				p.Policy, fmtF(p.TTFTP50S, "%.3f"), fmtF(p.TTFTP90S, "%.3f"), fmtF(p.TTFTP99S, "%.3f"),
				fmtF(p.HitRate, "%.3f"), fmtF(p.OracleFraction, "%.2f"), fmtF(p.ThroughputRPS, "%.3f"),
				fmtF(p.OverflowRatio, "%.3f"), fmtF(p.RoutingOverheadP50S*1000, "%.3f"), fmtF(p.RoutingOverheadP99S*1000, "%.3f"),
				fmtF(p.WarmupS, "%.1f"), fmtF(p.HitRateDip, "%.3f"), p.Errors, p.Requests)
		}
		b.WriteString("\n")
		for _, base := range []string{PolicyLeastRequest, PolicyPrefixHash} {
			bp := wl.Policy(base)
			if bp == nil {
				continue
			}
			fmt.Fprintf(&b, "Ratios against %s:\n\n| policy | TTFT p50 | TTFT p90 | TTFT p99 | hit rate | throughput |\n|---|---:|---:|---:|---:|---:|\n", base)
			for _, p := range wl.Policies {
				if p.Policy == base {
					continue
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", p.Policy,
					fmtRatio(p.TTFTP50S, bp.TTFTP50S), fmtRatio(p.TTFTP90S, bp.TTFTP90S), fmtRatio(p.TTFTP99S, bp.TTFTP99S),
					fmtRatio(p.HitRate, bp.HitRate), fmtRatio(p.ThroughputRPS, bp.ThroughputRPS))
			}
			b.WriteString("\n")
		}
		if len(wl.Targets) > 0 {
			b.WriteString("Targets for kv-aware:\n\n")
			for _, t := range wl.Targets {
				mark := "met"
				if !t.Met {
					mark = "MISSED"
				}
				fmt.Fprintf(&b, "- %s: %s (%s)\n", t.Target, mark, t.Measured)
			}
			b.WriteString("\n")
		}
		for _, p := range wl.Policies {
			if len(p.FirstErrors) > 0 {
				fmt.Fprintf(&b, "Errors under %s: %s\n\n", p.Policy, strings.Join(p.FirstErrors, "; "))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
