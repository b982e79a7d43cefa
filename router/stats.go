package router

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"
)

// ttftRing is how many recent TTFTs per instance feed the percentiles in Stats.
const ttftRing = 512

// instanceStats are one instance's counters for Stats.
type instanceStats struct {
	mu        sync.Mutex
	requests  uint64
	failures  uint64
	decisions [numDecisions]uint64
	ttft      []time.Duration // ring of the last ttftRing streaming TTFTs
	next      int
}

func (s *instanceStats) init() { s.ttft = make([]time.Duration, 0, ttftRing) }

func (s *instanceStats) record(d Decision, ttft time.Duration, failed bool) {
	s.mu.Lock()
	s.requests++
	s.decisions[d]++
	if failed {
		s.failures++
	}
	if ttft > 0 {
		if len(s.ttft) < ttftRing {
			s.ttft = append(s.ttft, ttft)
		} else {
			s.ttft[s.next] = ttft
			s.next = (s.next + 1) % ttftRing
		}
	}
	s.mu.Unlock()
}

// window keeps per-second fleet counters for the last 60 s.
type window struct {
	mu      sync.Mutex
	buckets [60]bucket
}

type bucket struct {
	sec          int64
	requests     uint64
	decisions    [numDecisions]uint64
	promptTokens uint64 // of requests whose engine reported usage
	engineCached uint64
	predicted    uint64
}

func newWindow() *window { return &window{} }

func (w *window) record(now time.Time, d Decision, prompt, engineCached, predicted int) {
	sec := now.Unix()
	w.mu.Lock()
	b := &w.buckets[sec%60]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	b.requests++
	b.decisions[d]++
	if engineCached >= 0 && prompt > 0 {
		b.promptTokens += uint64(prompt)
		b.engineCached += uint64(engineCached)
		b.predicted += uint64(max(predicted, 0))
	}
	w.mu.Unlock()
}

// sum adds the buckets of the last 60 s and the seconds they span.
func (w *window) sum(now time.Time) (bucket, float64) {
	sec := now.Unix()
	var t bucket
	oldest := sec
	w.mu.Lock()
	for i := range w.buckets {
		b := &w.buckets[i]
		if b.sec == 0 || sec-b.sec >= 60 {
			continue
		}
		oldest = min(oldest, b.sec)
		t.requests += b.requests
		for j := range t.decisions {
			t.decisions[j] += b.decisions[j]
		}
		t.promptTokens += b.promptTokens
		t.engineCached += b.engineCached
		t.predicted += b.predicted
	}
	w.mu.Unlock()
	return t, float64(sec - oldest + 1)
}

// Stats is the JSON snapshot behind /api/stats.
type Stats struct {
	RouterID  string          `json:"router_id"`
	Policy    string          `json:"policy"`
	Time      time.Time       `json:"time"`
	Fleet     FleetStats      `json:"fleet"`
	Instances []InstanceStats `json:"instances"`
}

// FleetStats are fleet-wide figures over the last 60 s.
type FleetStats struct {
	Instances int `json:"instances"`
	Healthy   int `json:"healthy"`
	// RequestsPerSecond over the window.
	RequestsPerSecond float64 `json:"requests_per_second"`
	// HitRate is engine-reported cached prompt tokens / prompt tokens (requests that
	// reported usage); PredictedHitRate is the router's prediction over the same requests.
	HitRate          float64 `json:"hit_rate"`
	PredictedHitRate float64 `json:"predicted_hit_rate"`
	// OverflowRatio is the share of requests decided by overflow.
	OverflowRatio float64 `json:"overflow_ratio"`
	// DecisionMix counts requests per decision name.
	DecisionMix map[string]uint64 `json:"decision_mix"`
	// EventLagSeconds is the worst instance's ingestion lag: the index's moving average
	// of engine batch time → applied (0 without an index).
	EventLagSeconds float64 `json:"event_lag_seconds"`
	// PendingKeys is the live size of the pending overlay.
	PendingKeys int `json:"pending_keys"`
	// PeerRouters is how many other router replicas are publishing in-flight counts.
	PeerRouters int `json:"peer_routers"`
	// HotPrefixes is how many tracked prefixes a new instance would be pre-warmed with
	// (seen at least twice; 0 with pre-warming off).
	HotPrefixes int `json:"hot_prefixes"`
	// TTFT percentiles over every instance's recent streaming TTFTs (the same rings as
	// the per-instance figures), seconds; 0 without data.
	TTFTP50Seconds float64 `json:"ttft_p50_seconds"`
	TTFTP90Seconds float64 `json:"ttft_p90_seconds"`
}

// InstanceStats is one instance's row.
type InstanceStats struct {
	ID        string   `json:"id"`
	URL       string   `json:"url"`
	Model     string   `json:"model"`
	Adapters  []string `json:"adapters,omitempty"`
	BlockSize int      `json:"block_size"`
	State     string   `json:"state"`
	Healthy   bool     `json:"healthy"`
	Ejected   bool     `json:"ejected"`
	// InFlight is this replica's; InFlightRemote the other replicas'.
	InFlight       int               `json:"in_flight"`
	InFlightRemote int               `json:"in_flight_remote"`
	Running        int               `json:"running"`
	Waiting        int               `json:"waiting"`
	Requests       uint64            `json:"requests"`
	Failures       uint64            `json:"failures"`
	Decisions      map[string]uint64 `json:"decisions"`
	TTFTP50Seconds float64           `json:"ttft_p50_seconds"`
	TTFTP90Seconds float64           `json:"ttft_p90_seconds"`
	// PrefillTokensPerSecond is the learned prefill rate.
	PrefillTokensPerSecond float64 `json:"prefill_tokens_per_second"`
	// EngineHitRate is the engine's own prefix-cache hit rate (cumulative counters).
	EngineHitRate float64 `json:"engine_hit_rate"`
	CachedBlocks  int     `json:"cached_blocks"`
	// IngestionLagSeconds is the index's moving average of engine batch time → applied.
	IngestionLagSeconds float64 `json:"ingestion_lag_seconds"`
	// Warm-up from the index: windowed hit rate vs the fleet's, and the time from join
	// until it first reached the fleet's.
	HitRate       float64   `json:"hit_rate"`
	FleetHitRate  float64   `json:"fleet_hit_rate"`
	Warm          bool      `json:"warm"`
	WarmupSeconds float64   `json:"warmup_seconds"`
	JoinedAt      time.Time `json:"joined_at,omitzero"`
	// Prewarming is true while the router replays hot prefixes to this new instance; it
	// takes no real traffic then. Prewarm describes its pre-warming once there was one.
	Prewarming bool          `json:"prewarming"`
	Prewarm    *PrewarmStats `json:"prewarm,omitempty"`
}

// Stats returns a snapshot of the router's view of the fleet.
func (r *Router) Stats() Stats {
	now := time.Now()
	nowNS := now.UnixNano()
	f := r.fleet.Load()
	st := Stats{RouterID: r.cfg.RouterID, Policy: r.cfg.Policy, Time: now, Instances: make([]InstanceStats, 0, len(f.list))}
	var lag time.Duration
	var allTTFT []time.Duration
	for _, in := range f.list {
		row := InstanceStats{
			ID: in.id, URL: in.rawURL,
			Healthy: in.health.available(nowNS), Ejected: in.health.ejected(nowNS),
			InFlight: int(in.inFlight.Load()), InFlightRemote: int(in.remote.Load()),
			Running: int(in.running.Load()), Waiting: int(in.waiting.Load()),
			PrefillTokensPerSecond: in.rate(),
			Decisions:              map[string]uint64{},
			Prewarming:             in.prewarm.active.Load(),
			Prewarm:                in.prewarm.stats(now),
		}
		if d := in.desc.Load(); d != nil {
			row.Model, row.Adapters, row.BlockSize = d.model, d.adapters, d.blockSize
		}
		in.mu.Lock()
		row.State = in.idx.state
		row.CachedBlocks = in.idx.blocks
		row.HitRate, row.FleetHitRate, row.Warm = in.idx.hitRate, in.idx.fleetHitRate, in.idx.warm
		row.WarmupSeconds = in.idx.warmup.Seconds()
		row.JoinedAt = in.idx.joinedAt
		if in.engineQueries > 0 {
			row.EngineHitRate = in.engineHits / in.engineQueries
		}
		row.IngestionLagSeconds = in.idx.lag.Seconds()
		lag = max(lag, in.idx.lag)
		in.mu.Unlock()
		if row.State == "" {
			row.State = "static"
		}
		in.stats.mu.Lock()
		row.Requests, row.Failures = in.stats.requests, in.stats.failures
		for i, n := range in.stats.decisions {
			if n > 0 {
				row.Decisions[Decision(i).String()] = n
			}
		}
		ttfts := slices.Clone(in.stats.ttft)
		in.stats.mu.Unlock()
		allTTFT = append(allTTFT, ttfts...)
		row.TTFTP50Seconds, row.TTFTP90Seconds = quantile(ttfts, 0.5), quantile(ttfts, 0.9)
		if row.Healthy {
			st.Fleet.Healthy++
		}
		st.Instances = append(st.Instances, row)
	}
	st.Fleet.Instances = len(f.list)
	st.Fleet.TTFTP50Seconds, st.Fleet.TTFTP90Seconds = quantile(allTTFT, 0.5), quantile(allTTFT, 0.9)
	sum, secs := r.window.sum(now)
	st.Fleet.RequestsPerSecond = float64(sum.requests) / secs
	if sum.promptTokens > 0 {
		st.Fleet.HitRate = float64(sum.engineCached) / float64(sum.promptTokens)
		st.Fleet.PredictedHitRate = float64(sum.predicted) / float64(sum.promptTokens)
	}
	if sum.requests > 0 {
		st.Fleet.OverflowRatio = float64(sum.decisions[DecisionOverflow]) / float64(sum.requests)
	}
	st.Fleet.DecisionMix = map[string]uint64{}
	for i, n := range sum.decisions {
		if n > 0 {
			st.Fleet.DecisionMix[Decision(i).String()] = n
		}
	}
	st.Fleet.EventLagSeconds = lag.Seconds()
	st.Fleet.PendingKeys = r.pending.live(nowNS)
	if r.peers != nil {
		st.Fleet.PeerRouters = r.peers.count(now)
	}
	if r.hot != nil {
		st.Fleet.HotPrefixes = r.hot.replayable()
	}
	return st
}

// quantile of ds (sorted in place), 0 when empty.
func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q * float64(len(ds)-1))
	return ds[i].Seconds()
}

func (r *Router) serveStats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.Stats())
}
