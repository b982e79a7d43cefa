package bench

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"time"
)

// Float is a float64 that encodes NaN and ±Inf as JSON null (a figure that was not
// measured), since JSON has no NaN.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler (null → NaN).
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

// Valid reports whether f holds a measured figure.
func (f Float) Valid() bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// Point is one point of a time series; T in simulated seconds since the start of the run.
type Point struct {
	T float64 `json:"t"`
	V Float   `json:"v"`
}

// InstanceWarmup is one instance's warm-up: from its join until its rolling hit rate first
// reached the fleet's.
type InstanceWarmup struct {
	Instance string `json:"instance"`
	// JoinedS is when it joined, simulated seconds since the start (0 for the initial fleet).
	JoinedS float64 `json:"joined_s"`
	// WarmupS is the warm-up time in simulated seconds; null if it never got warm.
	WarmupS Float `json:"warmup_s"`
	// Requests it served and its overall hit rate (engine-reported cached tokens / prompt tokens).
	Requests int   `json:"requests"`
	HitRate  Float `json:"hit_rate"`
	// IndexWarmupS is the index's own warm-up figure (heartbeat counters, router stats),
	// in simulated seconds; null if the index did not call it warm.
	IndexWarmupS Float   `json:"index_warmup_s"`
	Curve        []Point `json:"curve"`
}

// PolicyResult is one policy's run of one workload. Times are simulated seconds (client
// wall time divided by the time scale) except the routing overhead, which is real time.
type PolicyResult struct {
	Policy string `json:"policy"`
	// HitRate is the engines' own prefix-cache hit rate over the run (Δhits/Δqueries of
	// vllm:prefix_cache_*_total summed over the fleet), in tokens.
	HitRate Float `json:"hit_rate"`
	// OracleFraction is HitRate / the workload's oracle hit rate.
	OracleFraction Float `json:"oracle_fraction"`
	TTFTP50S       Float `json:"ttft_p50_s"`
	TTFTP90S       Float `json:"ttft_p90_s"`
	TTFTP99S       Float `json:"ttft_p99_s"`
	// ThroughputRPS is completed requests per simulated second while the offered load
	// was full (from the start until the first closed-loop client ran out of work, or the
	// last open-loop arrival), so the drain at the end does not count.
	ThroughputRPS Float `json:"throughput_rps"`
	// MakespanThroughputRPS is every completed request over the whole run, drain included.
	MakespanThroughputRPS Float `json:"makespan_throughput_rps"`
	// OverflowRatio is the share of requests the router decided as overflow.
	OverflowRatio       Float `json:"overflow_ratio"`
	RoutingOverheadP50S Float `json:"routing_overhead_p50_s"`
	RoutingOverheadP99S Float `json:"routing_overhead_p99_s"`
	// WarmupS is the mean warm-up time of the instances that joined mid-run (or, without
	// joins, of every instance from the start) that got warm; null if none did.
	WarmupS Float `json:"warmup_s"`

	// Runs is how many times the policy ran; with more than one, every figure above is
	// the median over the runs and Range holds each figure's [min, max].
	Runs  int                 `json:"runs"`
	Range map[string][2]Float `json:"range,omitempty"`

	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Errors    int `json:"errors"`
	// FirstErrors holds up to 5 distinct error messages.
	FirstErrors []string `json:"first_errors,omitempty"`
	DurationS   Float    `json:"duration_s"`
	WallS       Float    `json:"wall_s"`
	// ClientHitRate is Σ cached_tokens / Σ prompt_tokens from the responses' usage.
	ClientHitRate Float `json:"client_hit_rate"`
	// HitRateDip is the fleet hit rate just before the join minus its lowest after it (scale-out).
	HitRateDip Float          `json:"hit_rate_dip"`
	Decisions  map[string]int `json:"decisions"`
	// RoutingSamples is the number of routing decisions behind the overhead percentiles.
	RoutingSamples uint64 `json:"routing_samples"`
	// PrewarmRequests counts the router's pre-warming replays to joining engines by
	// result (ok, error, timeout, canceled); empty when none were sent.
	PrewarmRequests map[string]int `json:"prewarm_requests,omitempty"`
	// PrewarmS is the mean time a pre-warmed newcomer spent pre-warming (appearance →
	// taking traffic), simulated seconds; null when none was pre-warmed.
	PrewarmS        Float            `json:"prewarm_s"`
	Instances       []InstanceWarmup `json:"instances"`
	TTFTCDF         []CDFPoint       `json:"ttft_cdf"`
	HitRateOverTime []Point          `json:"hit_rate_over_time"`
}

// WorkloadResult is every policy's run of one workload on the same trace.
type WorkloadResult struct {
	Name          string         `json:"name"`
	OracleHitRate Float          `json:"oracle_hit_rate"`
	Requests      int            `json:"requests"`
	Engines       int            `json:"engines"`
	Joins         []Join         `json:"joins,omitempty"`
	Mode          string         `json:"mode"`
	PromptTokens  int64          `json:"prompt_tokens"`
	Policies      []PolicyResult `json:"policies"`
	Targets       []TargetCheck  `json:"targets,omitempty"`
}

// Report is a whole benchmark run.
type Report struct {
	Date      string  `json:"date"`
	Machine   string  `json:"machine"`
	Command   string  `json:"command"`
	TimeScale float64 `json:"time_scale"`
	Profile   string  `json:"profile"`
	Seed      uint64  `json:"seed"`
	// PrewarmPrefixes is the routers' PrewarmPrefixes (0 = pre-warming off).
	PrewarmPrefixes int              `json:"prewarm_prefixes"`
	Workloads       []WorkloadResult `json:"workloads"`
}

// Policy returns the named policy's result, or nil.
func (w *WorkloadResult) Policy(name string) *PolicyResult {
	for i := range w.Policies {
		if w.Policies[i].Policy == name {
			return &w.Policies[i]
		}
	}
	return nil
}

// analysis inputs gathered by the harness for one policy run.
type runData struct {
	Policy    string
	Samples   []Sample
	Wall      time.Duration
	LoadEnd   time.Duration
	TimeScale float64
	Engines   CacheCounters // fleet delta over the run
	Router    RouterMetrics
	// Joined maps instance id → wall offset of its join (0 for the initial fleet).
	Joined map[string]time.Duration
	// JoinAt is the wall offset of the (first) mid-run join; 0 if none.
	JoinAt time.Duration
}

// analyze turns one policy run into its PolicyResult.
func analyze(d runData, oracle float64) PolicyResult {
	nan := Float(math.NaN())
	scale := d.TimeScale
	res := PolicyResult{
		Policy: d.Policy, Runs: 1, Requests: len(d.Samples), Decisions: map[string]int{},
		HitRate: nan, OracleFraction: nan, TTFTP50S: nan, TTFTP90S: nan, TTFTP99S: nan,
		ThroughputRPS: nan, MakespanThroughputRPS: nan, OverflowRatio: nan, WarmupS: nan, ClientHitRate: nan, HitRateDip: nan,
		RoutingOverheadP50S: Float(d.Router.RoutingP50), RoutingOverheadP99S: Float(d.Router.RoutingP99),
		RoutingSamples: d.Router.RoutingCount,
		WallS:          Float(d.Wall.Seconds()), DurationS: Float(d.Wall.Seconds() / scale),
	}
	res.PrewarmS = nan
	if d.Router.PrewarmCount > 0 {
		res.PrewarmS = Float(d.Router.PrewarmSeconds / float64(d.Router.PrewarmCount) / scale)
	}
	for k, v := range d.Router.Prewarm {
		if res.PrewarmRequests == nil {
			res.PrewarmRequests = map[string]int{}
		}
		res.PrewarmRequests[k] = int(v)
	}
	var ttft []float64
	var cached, prompt int64
	seenErr := map[string]bool{}
	var first, last time.Duration = -1, 0
	decided := 0
	for i := range d.Samples {
		s := &d.Samples[i]
		if s.Decision != "" {
			res.Decisions[s.Decision]++
			decided++
		}
		if !s.OK() {
			res.Errors++
			if !seenErr[s.Err] && len(res.FirstErrors) < 5 {
				seenErr[s.Err] = true
				res.FirstErrors = append(res.FirstErrors, s.Err)
			}
			continue
		}
		res.Completed++
		ttft = append(ttft, s.TTFT.Seconds()/scale)
		cached += int64(s.CachedTokens)
		prompt += int64(s.PromptTokens)
		if first < 0 || s.Start < first {
			first = s.Start
		}
		if end := s.Start + s.Latency; end > last {
			last = end
		}
	}
	if len(ttft) > 0 {
		sort.Float64s(ttft)
		res.TTFTP50S = Float(percentileSorted(ttft, 50))
		res.TTFTP90S = Float(percentileSorted(ttft, 90))
		res.TTFTP99S = Float(percentileSorted(ttft, 99))
		res.TTFTCDF = CDF(ttft, 100)
	}
	if res.Completed > 0 && last > first {
		simDur := (last - first).Seconds() / scale
		res.DurationS = Float(simDur)
		res.MakespanThroughputRPS = Float(float64(res.Completed) / simDur)
		res.ThroughputRPS = res.MakespanThroughputRPS
		if d.LoadEnd > first {
			inWindow := 0
			for i := range d.Samples {
				if s := &d.Samples[i]; s.OK() && s.Start+s.Latency <= d.LoadEnd {
					inWindow++
				}
			}
			// A window holding under a tenth of the run says nothing steady: keep the makespan figure.
			if inWindow*10 >= res.Completed {
				res.ThroughputRPS = Float(float64(inWindow) / ((d.LoadEnd - first).Seconds() / scale))
			}
		}
	}
	if prompt > 0 {
		res.ClientHitRate = Float(float64(cached) / float64(prompt))
	}
	if d.Engines.Queries > 0 {
		res.HitRate = Float(d.Engines.HitRate())
		if oracle > 0 {
			res.OracleFraction = Float(d.Engines.HitRate() / oracle)
		}
	}
	switch {
	case decided > 0:
		res.OverflowRatio = Float(float64(res.Decisions["overflow"]) / float64(decided))
	case len(d.Router.Decisions) > 0:
		total := 0.0
		for k, v := range d.Router.Decisions {
			total += v
			res.Decisions[k] = int(v)
		}
		if total > 0 {
			res.OverflowRatio = Float(d.Router.Decisions["overflow"] / total)
		}
	}
	span := last
	if span <= 0 {
		span = d.Wall
	}
	window := span / 20
	if window <= 0 {
		window = time.Second
	}
	res.HitRateOverTime = hitRateSeries(d.Samples, "", 0, span, window, scale, 1)
	if d.JoinAt > 0 {
		// Windows of a tenth of the run: a twentieth holds too few requests for a rate.
		res.HitRateDip = hitRateDip(d.Samples, d.JoinAt, 2*window, span)
	}
	res.Instances, res.WarmupS = warmups(d, window, span)
	return res
}

// hitRateSeries buckets completed requests (of one instance, or all with inst "") by
// completion time into windows and returns Σcached/Σprompt per window, from `from`; with
// smooth > 1 each point covers the trailing smooth windows (a rolling rate).
func hitRateSeries(samples []Sample, inst string, from, span, window time.Duration, scale float64, smooth int) []Point {
	n := int((span-from)/window) + 1
	if n < 1 {
		return nil
	}
	cached := make([]int64, n)
	prompt := make([]int64, n)
	for i := range samples {
		s := &samples[i]
		if !s.OK() || (inst != "" && s.Instance != inst) {
			continue
		}
		end := s.Start + s.Latency
		if end < from {
			continue
		}
		b := int((end - from) / window)
		if b >= n {
			b = n - 1
		}
		cached[b] += int64(s.CachedTokens)
		prompt[b] += int64(s.PromptTokens)
	}
	smooth = max(smooth, 1)
	var out []Point
	for b := 0; b < n; b++ {
		if prompt[b] == 0 {
			continue
		}
		var c, p int64
		for k := max(0, b-smooth+1); k <= b; k++ {
			c += cached[k]
			p += prompt[k]
		}
		t := (from + time.Duration(b+1)*window).Seconds() / scale
		out = append(out, Point{T: t, V: Float(float64(c) / float64(p))})
	}
	return out
}

// rate is Σcached/Σprompt of the completed requests of inst ("" = all) ending in (lo, hi].
func rate(samples []Sample, inst string, lo, hi time.Duration) (float64, int) {
	var c, p int64
	n := 0
	for i := range samples {
		s := &samples[i]
		if !s.OK() || (inst != "" && s.Instance != inst) {
			continue
		}
		if end := s.Start + s.Latency; end > lo && end <= hi {
			c += int64(s.CachedTokens)
			p += int64(s.PromptTokens)
			n++
		}
	}
	if p == 0 {
		return math.NaN(), n
	}
	return float64(c) / float64(p), n
}

// hitRateDip is the fleet's hit rate in the window before the join minus its lowest
// window after it.
func hitRateDip(samples []Sample, join, window, span time.Duration) Float {
	before, _ := rate(samples, "", join-window, join)
	if math.IsNaN(before) {
		return Float(math.NaN())
	}
	low := math.Inf(1)
	for t := join; t < span; t += window / 2 {
		if r, n := rate(samples, "", t, t+window); n > 0 && r < low {
			low = r
		}
	}
	if math.IsInf(low, 1) {
		return Float(math.NaN())
	}
	return Float(before - low)
}

// warmups computes each instance's warm-up: the first completion of one of its requests,
// after its join, at which its hit rate over the trailing window reached the fleet's over
// the same window (with at least 2 of its requests in the window).
func warmups(d runData, window, span time.Duration) ([]InstanceWarmup, Float) {
	scale := d.TimeScale
	ids := map[string]bool{}
	for i := range d.Samples {
		if d.Samples[i].Instance != "" {
			ids[d.Samples[i].Instance] = true
		}
	}
	for id := range d.Joined {
		ids[id] = true
	}
	names := make([]string, 0, len(ids))
	for id := range ids {
		names = append(names, id)
	}
	sort.Strings(names)
	midRun := d.JoinAt > 0
	var sum float64
	var warm int
	var out []InstanceWarmup
	for _, id := range names {
		joined := d.Joined[id]
		iw := InstanceWarmup{Instance: id, JoinedS: joined.Seconds() / scale, WarmupS: Float(math.NaN()), IndexWarmupS: Float(math.NaN())}
		var ends []time.Duration
		for i := range d.Samples {
			s := &d.Samples[i]
			if s.Instance == id && s.OK() {
				iw.Requests++
				ends = append(ends, s.Start+s.Latency)
			}
		}
		r, _ := rate(d.Samples, id, -1, span+time.Hour)
		iw.HitRate = Float(r)
		sort.Slice(ends, func(a, b int) bool { return ends[a] < ends[b] })
		for _, e := range ends {
			if e < joined {
				continue
			}
			mine, n := rate(d.Samples, id, e-window, e)
			fleet, _ := rate(d.Samples, "", e-window, e)
			if n >= 2 && !math.IsNaN(mine) && mine >= fleet {
				iw.WarmupS = Float((e - joined).Seconds() / scale)
				break
			}
		}
		// Per instance a window holds few requests: the curve is a rolling rate over 3 windows.
		iw.Curve = hitRateSeries(d.Samples, id, joined, span, window, scale, 3)
		if (!midRun || joined > 0) && iw.WarmupS.Valid() {
			sum += float64(iw.WarmupS)
			warm++
		}
		out = append(out, iw)
	}
	if warm == 0 {
		return out, Float(math.NaN())
	}
	return out, Float(sum / float64(warm))
}

// combineRuns merges repeated runs of one policy: the median of every figure, its range,
// summed counts, and the series (CDF, curves) of the run whose P50 TTFT is the median.
func combineRuns(runs []PolicyResult) PolicyResult {
	if len(runs) == 1 {
		return runs[0]
	}
	fields := []struct {
		name string
		get  func(*PolicyResult) *Float
	}{
		{"hit_rate", func(p *PolicyResult) *Float { return &p.HitRate }},
		{"oracle_fraction", func(p *PolicyResult) *Float { return &p.OracleFraction }},
		{"ttft_p50_s", func(p *PolicyResult) *Float { return &p.TTFTP50S }},
		{"ttft_p90_s", func(p *PolicyResult) *Float { return &p.TTFTP90S }},
		{"ttft_p99_s", func(p *PolicyResult) *Float { return &p.TTFTP99S }},
		{"throughput_rps", func(p *PolicyResult) *Float { return &p.ThroughputRPS }},
		{"makespan_throughput_rps", func(p *PolicyResult) *Float { return &p.MakespanThroughputRPS }},
		{"overflow_ratio", func(p *PolicyResult) *Float { return &p.OverflowRatio }},
		{"routing_overhead_p50_s", func(p *PolicyResult) *Float { return &p.RoutingOverheadP50S }},
		{"routing_overhead_p99_s", func(p *PolicyResult) *Float { return &p.RoutingOverheadP99S }},
		{"warmup_s", func(p *PolicyResult) *Float { return &p.WarmupS }},
		{"hit_rate_dip", func(p *PolicyResult) *Float { return &p.HitRateDip }},
		{"client_hit_rate", func(p *PolicyResult) *Float { return &p.ClientHitRate }},
		{"duration_s", func(p *PolicyResult) *Float { return &p.DurationS }},
		{"wall_s", func(p *PolicyResult) *Float { return &p.WallS }},
	}
	// The representative run keeps the series: the one with the median P50 TTFT.
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := runs[order[a]].TTFTP50S, runs[order[b]].TTFTP50S
		return x.Valid() && (!y.Valid() || x < y)
	})
	out := runs[order[len(order)/2]]
	out.Runs = len(runs)
	out.Range = map[string][2]Float{}
	for _, f := range fields {
		var vals []float64
		for i := range runs {
			if v := *f.get(&runs[i]); v.Valid() {
				vals = append(vals, float64(v))
			}
		}
		if len(vals) == 0 {
			*f.get(&out) = Float(math.NaN())
			continue
		}
		sort.Float64s(vals)
		*f.get(&out) = Float(percentileSorted(vals, 50))
		out.Range[f.name] = [2]Float{Float(vals[0]), Float(vals[len(vals)-1])}
	}
	out.Requests, out.Completed, out.Errors, out.RoutingSamples = 0, 0, 0, 0
	out.Decisions = map[string]int{}
	out.FirstErrors = nil
	for i := range runs {
		r := &runs[i]
		out.Requests += r.Requests
		out.Completed += r.Completed
		out.Errors += r.Errors
		out.RoutingSamples += r.RoutingSamples
		for k, v := range r.Decisions {
			out.Decisions[k] += v
		}
		for _, e := range r.FirstErrors {
			if len(out.FirstErrors) < 5 {
				out.FirstErrors = append(out.FirstErrors, e)
			}
		}
	}
	return out
}
