package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vLLM's prefix-cache counters, in tokens (the simulator exports the same names).
const (
	metricPrefixQueries = "vllm:prefix_cache_queries"
	metricPrefixHits    = "vllm:prefix_cache_hits"
	metricRoutingDur    = "kvroute_router_routing_duration_seconds"
	metricRouterReqs    = "kvroute_router_requests_total"
	metricPrewarmReqs   = "kvroute_router_prewarm_requests_total"
	metricPrewarmDur    = "kvroute_router_prewarm_duration_seconds"
)

// ErrScrape is returned when an engine's /metrics cannot be read or lacks a counter.
var ErrScrape = errors.New("bench: scrape failed")

// CacheCounters are an engine's prefix-cache counters, in tokens.
type CacheCounters struct {
	Queries, Hits float64
}

// Sub returns c − o.
func (c CacheCounters) Sub(o CacheCounters) CacheCounters {
	return CacheCounters{Queries: c.Queries - o.Queries, Hits: c.Hits - o.Hits}
}

// Add returns c + o.
func (c CacheCounters) Add(o CacheCounters) CacheCounters {
	return CacheCounters{Queries: c.Queries + o.Queries, Hits: c.Hits + o.Hits}
}

// HitRate is Hits/Queries, 0 when nothing was queried.
func (c CacheCounters) HitRate() float64 {
	if c.Queries <= 0 {
		return 0
	}
	return c.Hits / c.Queries
}

// ScrapeCacheCounters reads vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total
// from an engine's /metrics (Prometheus text format), summed over every label set.
func ScrapeCacheCounters(ctx context.Context, hc *http.Client, baseURL string) (CacheCounters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return CacheCounters{}, fmt.Errorf("%w: %w", ErrScrape, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return CacheCounters{}, fmt.Errorf("%w: %s: %w", ErrScrape, baseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return CacheCounters{}, fmt.Errorf("%w: %s/metrics: HTTP %d", ErrScrape, baseURL, resp.StatusCode)
	}
	return parseCacheCounters(resp.Body)
}

func parseCacheCounters(r io.Reader) (CacheCounters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return CacheCounters{}, fmt.Errorf("%w: %w", ErrScrape, err)
	}
	q, okQ := sumFamily(fams, metricPrefixQueries)
	h, okH := sumFamily(fams, metricPrefixHits)
	if !okQ || !okH {
		return CacheCounters{}, fmt.Errorf("%w: %s_total or %s_total missing", ErrScrape, metricPrefixQueries, metricPrefixHits)
	}
	return CacheCounters{Queries: q, Hits: h}, nil
}

// sumFamily sums a counter (or gauge/untyped) family found under name or name_total.
func sumFamily(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	f, ok := fams[name+"_total"]
	if !ok {
		f, ok = fams[name]
	}
	if !ok {
		return 0, false
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, true
}

// RouterMetrics is what the benchmark reads from the router's registry after a run.
type RouterMetrics struct {
	// RoutingP50/P99 estimate the routing-decision time (seconds, real time) from
	// kvroute_router_routing_duration_seconds; NaN if the router observed nothing.
	RoutingP50, RoutingP99 float64
	// RoutingCount is the number of observations.
	RoutingCount uint64
	// Decisions counts kvroute_router_requests_total by decision label.
	Decisions map[string]float64
	// Prewarm counts kvroute_router_prewarm_requests_total by result (ok, error, timeout,
	// canceled): the router's pre-warming replays to joining engines.
	Prewarm map[string]float64
	// PrewarmCount newcomers were pre-warmed, for PrewarmSeconds in total (real time, from
	// kvroute_router_prewarm_duration_seconds: appearance → joining the candidate set).
	PrewarmCount   uint64
	PrewarmSeconds float64
}

// ReadRouterMetrics gathers the router's metrics from its registry.
func ReadRouterMetrics(g prometheus.Gatherer) (RouterMetrics, error) {
	fams, err := g.Gather()
	if err != nil {
		return RouterMetrics{}, fmt.Errorf("%w: router registry: %w", ErrScrape, err)
	}
	rm := RouterMetrics{RoutingP50: math.NaN(), RoutingP99: math.NaN(), Decisions: map[string]float64{}, Prewarm: map[string]float64{}}
	for _, f := range fams {
		switch f.GetName() {
		case metricRoutingDur:
			var merged []Bucket
			for _, m := range f.GetMetric() {
				h := m.GetHistogram()
				if h == nil {
					continue
				}
				rm.RoutingCount += h.GetSampleCount()
				merged = mergeBuckets(merged, h)
			}
			if rm.RoutingCount > 0 {
				merged = append(merged, Bucket{UpperBound: math.Inf(1), Count: float64(rm.RoutingCount)})
				rm.RoutingP50 = HistogramQuantile(0.5, merged)
				rm.RoutingP99 = HistogramQuantile(0.99, merged)
			}
		case metricRouterReqs:
			for _, m := range f.GetMetric() {
				d := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "decision" {
						d = l.GetValue()
					}
				}
				rm.Decisions[d] += m.GetCounter().GetValue()
			}
		case metricPrewarmDur:
			for _, m := range f.GetMetric() {
				if h := m.GetHistogram(); h != nil {
					rm.PrewarmCount += h.GetSampleCount()
					rm.PrewarmSeconds += h.GetSampleSum()
				}
			}
		case metricPrewarmReqs:
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" {
						rm.Prewarm[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return rm, nil
}

// mergeBuckets adds h's cumulative buckets into acc (same bounds across label sets).
func mergeBuckets(acc []Bucket, h *dto.Histogram) []Bucket {
	for _, b := range h.GetBucket() {
		ub := b.GetUpperBound()
		found := false
		for i := range acc {
			if acc[i].UpperBound == ub {
				acc[i].Count += float64(b.GetCumulativeCount())
				found = true
				break
			}
		}
		if !found && !math.IsInf(ub, 1) {
			acc = append(acc, Bucket{UpperBound: ub, Count: float64(b.GetCumulativeCount())})
		}
	}
	return acc
}
