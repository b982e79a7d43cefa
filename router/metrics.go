package router

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the router's Prometheus series (names in docs/operations.md).
type metrics struct {
	requests          *prometheus.CounterVec
	routingDuration   prometheus.Histogram
	predictedCached   prometheus.Counter
	engineCached      prometheus.Counter
	predictionError   prometheus.Histogram
	ttft              *prometheus.HistogramVec
	inFlight          *prometheus.GaugeVec
	overflowRatio     prometheus.Gauge
	upstreamErrors    *prometheus.CounterVec
	retries           prometheus.Counter
	ejected           *prometheus.GaugeVec
	warmup            *prometheus.GaugeVec
	eventLag          prometheus.Gauge
	predictionMatches *prometheus.CounterVec
	prewarmRequests   *prometheus.CounterVec
	prewarmDuration   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_router_requests_total",
			Help: "Requests handled, by routing decision, requested model and HTTP status code.",
		}, []string{"decision", "model", "code"}),
		routingDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvroute_router_routing_duration_seconds",
			Help:    "Time to decide where a request goes: parse, tokenize, keys, index lookup, policy.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 16),
		}),
		predictedCached: f.NewCounter(prometheus.CounterOpts{
			Name: "kvroute_router_predicted_cached_tokens_total",
			Help: "Prompt tokens the router predicted the chosen engine had cached.",
		}),
		engineCached: f.NewCounter(prometheus.CounterOpts{
			Name: "kvroute_router_engine_cached_tokens_total",
			Help: "Prompt tokens the engines reported cached (usage.prompt_tokens_details.cached_tokens).",
		}),
		predictionError: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvroute_router_prediction_error_tokens",
			Help:    "Engine-reported cached tokens minus the router's prediction, per request that reported usage.",
			Buckets: []float64{-4096, -1024, -256, -64, -16, -1, 0, 1, 16, 64, 256, 1024, 4096},
		}),
		ttft: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvroute_router_ttft_seconds",
			Help:    "Time to first token seen by the router (streaming requests), per instance.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"instance"}),
		inFlight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvroute_router_in_flight",
			Help: "Requests this router replica has in flight, per instance.",
		}, []string{"instance"}),
		overflowRatio: f.NewGauge(prometheus.GaugeOpts{
			Name: "kvroute_router_overflow_ratio",
			Help: "Share of routed requests decided by overflow over the last 60 s.",
		}),
		upstreamErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_router_upstream_errors_total",
			Help: "Upstream failures by instance and kind (connect, status_5xx, timeout, stream, health).",
		}, []string{"instance", "kind"}),
		retries: f.NewCounter(prometheus.CounterOpts{
			Name: "kvroute_router_retries_total",
			Help: "Requests retried on another instance after a failure before the first byte.",
		}),
		ejected: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvroute_router_instance_ejected",
			Help: "1 while an instance is ejected after repeated failures, else 0.",
		}, []string{"instance"}),
		warmup: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvroute_router_instance_warmup_seconds",
			Help: "Time from an instance's join until its hit rate first reached the fleet's (from the index).",
		}, []string{"instance"}),
		eventLag: f.NewGauge(prometheus.GaugeOpts{
			Name: "kvroute_router_event_lag_seconds",
			Help: "Worst instance's ingestion lag: the index's moving average (about 8 batches) of engine batch time to applied, in seconds.",
		}),
		predictionMatches: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_router_prediction_checks_total",
			Help: "Requests whose engine-reported cached tokens were compared with the prediction, by result (exact, under, over).",
		}, []string{"result"}),
		prewarmRequests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_router_prewarm_requests_total",
			Help: "Hot-prefix replays sent to new instances before they took traffic, by result (ok, error, timeout, canceled).",
		}, []string{"result"}),
		prewarmDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvroute_router_prewarm_duration_seconds",
			Help:    "Time from a new instance's appearance until it joined the candidate set after pre-warming.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
	}
}
