package sim

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// vLLM's latency buckets (seconds) for time_to_first_token_seconds.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
	0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

var e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
	40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

var stepBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}

// metrics are a Server's Prometheus metrics: vLLM's names and labels (model_name,
// engine) for what vLLM exports, kvroute_sim_* for the simulator's own figures. It is
// one Collector over a replaceable set, so that a simulated restart resets every
// counter and histogram to zero, as a real engine restart does.
type metrics struct {
	cur   atomic.Pointer[metricSet]
	descs []*prometheus.Desc
	build func() *metricSet
}

// metricSet is one generation of the metrics (from start, or from the last restart).
type metricSet struct {
	cs []prometheus.Collector

	prefixQueries, prefixHits     prometheus.Counter
	promptTokens, genTokens       prometheus.Counter
	preemptions                   prometheus.Counter
	successLength, successAbort   prometheus.Counter
	ttft, e2e                     prometheus.Observer
	wallTTFT                      prometheus.Observer
	steps                         prometheus.Counter
	stepDur                       prometheus.Observer
	batchesPublished              prometheus.Counter
	batchesDropped                *prometheus.CounterVec
	replayRequests, replayBatches prometheus.Counter
	replayMalformed               prometheus.Counter
	faultFailures                 prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, model string, load func() (int, int, float64), evictions func() float64) (*metrics, error) {
	m := &metrics{build: func() *metricSet { return newMetricSet(model, load, evictions) }}
	set := m.build()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range set.cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	for d := range ch {
		m.descs = append(m.descs, d)
	}
	m.cur.Store(set)
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.cur.Load().cs {
		c.Collect(ch)
	}
}

// reset starts a new generation: every counter and histogram back to zero.
func (m *metrics) reset() { m.cur.Store(m.build()) }

func (m *metrics) set() *metricSet { return m.cur.Load() }

func newMetricSet(model string, load func() (int, int, float64), evictions func() float64) *metricSet {
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	var cs []prometheus.Collector
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		cs = append(cs, c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		cs = append(cs, h)
		return h
	}
	gauge := func(name, help string, f func() float64) {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	m := &metricSet{
		prefixQueries:    counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in tokens (prompt tokens of every admitted request)."),
		prefixHits:       counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in tokens (prompt tokens served from the cache)."),
		promptTokens:     counter("vllm:prompt_tokens_total", "Prompt tokens processed."),
		genTokens:        counter("vllm:generation_tokens_total", "Generation tokens produced."),
		preemptions:      counter("vllm:num_preemptions_total", "Requests preempted (recompute) for lack of KV-cache blocks."),
		ttft:             hist("vllm:time_to_first_token_seconds", "Time to first token, in simulated seconds.", ttftBuckets),
		e2e:              hist("vllm:e2e_request_latency_seconds", "Request latency from arrival to last token, in simulated seconds.", e2eBuckets),
		wallTTFT:         hist("kvroute_sim_wall_time_to_first_token_seconds", "Time to first token in wall-clock seconds (simulated time × time scale, plus scheduling overhead).", ttftBuckets),
		steps:            counter("kvroute_sim_steps_total", "Scheduler steps run."),
		stepDur:          hist("kvroute_sim_step_duration_seconds", "Scheduler step duration from the cost model, in simulated seconds.", stepBuckets),
		batchesPublished: counter("kvroute_sim_kv_event_batches_published_total", "KV-event batches sent on the PUB socket."),
		replayRequests:   counter("kvroute_sim_kv_event_replay_requests_total", "Replay requests answered."),
		replayBatches:    counter("kvroute_sim_kv_event_replay_batches_total", "Batches sent in replay answers."),
		replayMalformed:  counter("kvroute_sim_kv_event_replay_malformed_total", "Malformed replay requests ignored."),
		faultFailures:    counter("kvroute_sim_injected_failures_total", "Requests failed or streams cut by fault injection."),
	}
	success := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Finished requests by finish reason.", ConstLabels: labels}, []string{"finished_reason"})
	m.successLength = success.WithLabelValues("length")
	m.successAbort = success.WithLabelValues("abort")
	m.batchesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_sim_kv_event_batches_dropped_total", Help: "KV-event batches numbered but not sent, by reason (dropped, stopped: faults; send_error).", ConstLabels: labels}, []string{"reason"})
	cs = append(cs, success, m.batchesDropped)
	gauge("vllm:num_requests_running", "Requests in the running batch.", func() float64 { r, _, _ := load(); return float64(r) })
	gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", func() float64 { _, w, _ := load(); return float64(w) })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0..1 (1 = every block in use).", func() float64 { _, _, u := load(); return u })
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvroute_sim_kv_cache_evictions_total", Help: "Cached blocks evicted for reuse.", ConstLabels: labels}, evictions))
	m.cs = cs
	return m
}

func (m *metrics) prefixQuery(tokens, hits int) {
	s := m.set()
	s.prefixQueries.Add(float64(tokens))
	s.prefixHits.Add(float64(hits))
}

func (m *metrics) preempted() { m.set().preemptions.Inc() }
func (m *metrics) aborted()   { m.set().successAbort.Inc() }

func (m *metrics) firstToken(sim, wall time.Duration) {
	s := m.set()
	s.ttft.Observe(sim.Seconds())
	s.wallTTFT.Observe(wall.Seconds())
}

func (m *metrics) finished(prompt, gen int, e2e time.Duration) {
	s := m.set()
	s.promptTokens.Add(float64(prompt))
	s.genTokens.Add(float64(gen))
	s.successLength.Inc()
	s.e2e.Observe(e2e.Seconds())
}

func (m *metrics) stepDone(d time.Duration, _ int) {
	s := m.set()
	s.steps.Inc()
	s.stepDur.Observe(d.Seconds())
}

func (m *metrics) batchPublished()         { m.set().batchesPublished.Inc() }
func (m *metrics) batchDropped(why string) { m.set().batchesDropped.WithLabelValues(why).Inc() }
func (m *metrics) replayBad()              { m.set().replayMalformed.Inc() }
func (m *metrics) injected()               { m.set().faultFailures.Inc() }
func (m *metrics) replayServed(batches int) {
	s := m.set()
	s.replayRequests.Inc()
	s.replayBatches.Add(float64(batches))
}
