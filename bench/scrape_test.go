package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestScrapeCacheCounters(t *testing.T) {
	// The engine side: vLLM's counter names on a real registry served over HTTP.
	reg := prometheus.NewRegistry()
	q := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total"}, []string{"model_name", "engine"})
	h := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total"}, []string{"model_name", "engine"})
	reg.MustRegister(q, h)
	q.WithLabelValues("m", "0").Add(1000)
	q.WithLabelValues("m", "1").Add(500)
	h.WithLabelValues("m", "0").Add(600)
	h.WithLabelValues("m", "1").Add(150)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	c, err := ScrapeCacheCounters(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if c.Queries != 1500 || c.Hits != 750 || c.HitRate() != 0.5 {
		t.Fatalf("counters %+v", c)
	}
	d := c.Sub(CacheCounters{Queries: 500, Hits: 0})
	if d.HitRate() != 0.75 || d.Add(CacheCounters{1, 1}).Queries != 1001 {
		t.Fatalf("arithmetic: %+v", d)
	}
	if (CacheCounters{}).HitRate() != 0 {
		t.Fatal("nothing queried should be rate 0")
	}

	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "other_metric 1") }))
	defer empty.Close()
	if _, err := ScrapeCacheCounters(context.Background(), empty.Client(), empty.URL); !errors.Is(err, ErrScrape) {
		t.Fatalf("missing counters: %v", err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	defer down.Close()
	if _, err := ScrapeCacheCounters(context.Background(), down.Client(), down.URL); !errors.Is(err, ErrScrape) {
		t.Fatalf("HTTP 404: %v", err)
	}
}

func TestReadRouterMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_router_routing_duration_seconds", Buckets: []float64{0.0001, 0.001, 0.01}})
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_router_requests_total"}, []string{"decision", "model", "code"})
	prewarm := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_router_prewarm_requests_total"}, []string{"result"})
	prewarmDur := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_router_prewarm_duration_seconds"})
	reg.MustRegister(hist, reqs, prewarm, prewarmDur)
	rm, err := ReadRouterMetrics(reg)
	if err != nil || !math.IsNaN(rm.RoutingP50) || rm.RoutingCount != 0 {
		t.Fatalf("empty: %+v %v", rm, err)
	}
	for i := 0; i < 50; i++ {
		hist.Observe(0.00005)
	}
	for i := 0; i < 50; i++ {
		hist.Observe(0.0005)
	}
	reqs.WithLabelValues("cache_hit", "m", "200").Add(3)
	reqs.WithLabelValues("overflow", "m", "200").Add(1)
	reqs.WithLabelValues("overflow", "m", "503").Add(1)
	prewarm.WithLabelValues("ok").Add(5)
	prewarm.WithLabelValues("timeout").Add(2)
	prewarmDur.Observe(1.5)
	prewarmDur.Observe(2.5)
	rm, err = ReadRouterMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if rm.RoutingCount != 100 || math.Abs(rm.RoutingP50-0.0001) > 1e-12 || math.Abs(rm.RoutingP99-(0.0001+0.0009*0.98)) > 1e-12 {
		t.Fatalf("quantiles %+v", rm)
	}
	if rm.Decisions["overflow"] != 2 || rm.Decisions["cache_hit"] != 3 {
		t.Fatalf("decisions %v", rm.Decisions)
	}
	if rm.Prewarm["ok"] != 5 || rm.Prewarm["timeout"] != 2 || len(rm.Prewarm) != 2 {
		t.Fatalf("prewarm %v", rm.Prewarm)
	}
	if rm.PrewarmCount != 2 || rm.PrewarmSeconds != 4 {
		t.Fatalf("prewarm duration: %d newcomers, %v s", rm.PrewarmCount, rm.PrewarmSeconds)
	}
}
