package agent

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the agent's Prometheus series, registered on the injected registry. To run
// several agents on one registry, wrap it per agent (prometheus.WrapRegistererWith).
type metrics struct {
	batchesReceived  prometheus.Counter
	eventsReceived   [4]prometheus.Counter // by EventKind
	batchesPublished prometheus.Counter
	publishErrors    prometheus.Counter
	decodeErrors     prometheus.Counter
	gaps             prometheus.Counter
	replays          prometheus.Counter
	resyncs          prometheus.Counter
	orphans          prometheus.Counter
	skipped          [numSkipReasons]prometheus.Counter
	keysHeld         prometheus.Gauge
	publishDuration  prometheus.Histogram
	engineUp         prometheus.Gauge
	snapshots        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := &factory{reg: reg}
	m := &metrics{
		batchesReceived: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_batches_received_total",
			Help: "Engine event batches received and decoded (live and replayed)."}),
		batchesPublished: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_batches_published_total",
			Help: "EventBatch messages published to NATS."}),
		publishErrors: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_publish_errors_total",
			Help: "EventBatch or heartbeat publishes that NATS refused (the index heals the gap by a snapshot)."}),
		decodeErrors: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_decode_errors_total",
			Help: "ZMQ messages skipped because their frames or msgpack payload could not be decoded."}),
		gaps: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_gaps_total",
			Help: "Jumps in the engine's batch sequence number (dropped batches)."}),
		replays: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_replays_total",
			Help: "Replay requests sent to the engine's replay socket."}),
		resyncs: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_resyncs_total",
			Help: "New epochs after the first: lost history, engine restart or orphans."}),
		orphans: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_orphans_total",
			Help: "BlockStored events whose parent block the agent did not know."}),
		keysHeld: f.NewGauge(prometheus.GaugeOpts{Name: "kvroute_agent_keys_held",
			Help: "Block keys in the agent's mirror of its engine's prefix cache."}),
		publishDuration: f.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_agent_publish_duration_seconds",
			Help:    "Time to encode and hand one EventBatch to the NATS client.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10)}),
		engineUp: f.NewGauge(prometheus.GaugeOpts{Name: "kvroute_agent_engine_up",
			Help: "1 when the last scrape of the engine's /metrics succeeded, else 0."}),
		snapshots: f.NewCounter(prometheus.CounterOpts{Name: "kvroute_agent_snapshots_served_total",
			Help: "Snapshot requests answered."}),
	}
	ev := f.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_agent_events_received_total",
		Help: "Engine events received, by type (BlockStored, BlockRemoved, AllBlocksCleared, unknown)."}, []string{"type"})
	for k := range m.eventsReceived {
		m.eventsReceived[k] = ev.WithLabelValues(EventKind(k).String())
	}
	sk := f.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_agent_blocks_skipped_total",
		Help: "Stored blocks given no key, by reason (medium, group, multimodal, orphan, malformed)."}, []string{"reason"})
	for r := range m.skipped {
		m.skipped[r] = sk.WithLabelValues(SkipReason(r).String())
	}
	if f.err != nil {
		return nil, fmt.Errorf("agent: register metrics: %w", f.err)
	}
	return m, nil
}

// factory registers collectors on reg and keeps the errors instead of panicking, so a
// registry shared by two agents gives New a clear error.
type factory struct {
	reg prometheus.Registerer
	err error
}

func (f *factory) register(c prometheus.Collector) {
	if f.reg != nil {
		f.err = errors.Join(f.err, f.reg.Register(c))
	}
}

func (f *factory) NewCounter(o prometheus.CounterOpts) prometheus.Counter {
	c := prometheus.NewCounter(o)
	f.register(c)
	return c
}

func (f *factory) NewGauge(o prometheus.GaugeOpts) prometheus.Gauge {
	g := prometheus.NewGauge(o)
	f.register(g)
	return g
}

func (f *factory) NewHistogram(o prometheus.HistogramOpts) prometheus.Histogram {
	h := prometheus.NewHistogram(o)
	f.register(h)
	return h
}

func (f *factory) NewCounterVec(o prometheus.CounterOpts, labels []string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(o, labels)
	f.register(v)
	return v
}

func (m *metrics) observe(st *ApplyStats) {
	for k, n := range st.Events {
		if n > 0 {
			m.eventsReceived[k].Add(float64(n))
		}
	}
	for r, n := range st.Skipped {
		if n > 0 {
			m.skipped[r].Add(float64(n))
		}
	}
	if st.Orphans > 0 {
		m.orphans.Add(float64(st.Orphans))
	}
}
