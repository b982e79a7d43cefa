package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// engineClient reads the engine's /v1/models and /metrics.
type engineClient struct {
	base string
	hc   *http.Client
}

func newEngineClient(base string, timeout time.Duration) *engineClient {
	return &engineClient{base: strings.TrimRight(base, "/"), hc: &http.Client{Timeout: timeout}}
}

func (c *engineClient) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrEngine, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		return nil, fmt.Errorf("%w: GET %s: status %d", ErrEngine, path, resp.StatusCode)
	}
	return resp, nil
}

// models returns the served base model and the LoRA adapters from /v1/models. vLLM lists
// the base model with parent null and each adapter with parent = the base model.
func (c *engineClient) models(ctx context.Context) (base string, adapters []string, err error) {
	resp, err := c.get(ctx, "/v1/models")
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	var doc struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&doc); err != nil {
		return "", nil, fmt.Errorf("%w: /v1/models: %v", ErrEngine, err)
	}
	for _, m := range doc.Data {
		if m.Parent == nil || *m.Parent == "" {
			if base == "" {
				base = m.ID
			}
			continue
		}
		adapters = append(adapters, m.ID)
	}
	if base == "" {
		return "", nil, fmt.Errorf("%w: /v1/models lists no base model", ErrEngine)
	}
	return base, adapters, nil
}

// Metric names read from the engine, newest first, then their older vLLM names.
var (
	metricRunning = []string{"vllm:num_requests_running"}
	metricWaiting = []string{"vllm:num_requests_waiting"}
	metricUsage   = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	metricHits    = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	metricQueries = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
)

// load scrapes /metrics into a Load (ok=true). Gauges and counters of several label sets
// (one per engine of a data-parallel server) are summed; the KV usage is averaged.
func (c *engineClient) load(ctx context.Context) (*kvroutev1.Load, error) {
	resp, err := c.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: /metrics: %v", ErrEngine, err)
	}
	return loadFrom(fams), nil
}

func loadFrom(fams map[string]*dto.MetricFamily) *kvroutev1.Load {
	l := &kvroutev1.Load{Ok: true, ScrapedAtUnixNano: time.Now().UnixNano()}
	running, _ := sumMetric(fams, metricRunning)
	waiting, _ := sumMetric(fams, metricWaiting)
	l.Running, l.Waiting = uint32(running), uint32(waiting)
	if usage, n := sumMetric(fams, metricUsage); n > 0 {
		l.KvUsage = usage / float64(n)
	}
	l.PrefixCacheHits, _ = sumMetric(fams, metricHits)
	l.PrefixCacheQueries, _ = sumMetric(fams, metricQueries)
	return l
}

// sumMetric sums the first of names present, over its series; n is the series count.
func sumMetric(fams map[string]*dto.MetricFamily, names []string) (sum float64, n int) {
	for _, name := range names {
		f, ok := fams[name]
		if !ok {
			// The text parser files counters under their family name without _total.
			f, ok = fams[strings.TrimSuffix(name, "_total")]
		}
		if !ok || len(f.GetMetric()) == 0 {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Untyped != nil:
				sum += m.GetUntyped().GetValue()
			default:
				continue
			}
			n++
		}
		return sum, n
	}
	return 0, 0
}
