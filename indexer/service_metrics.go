package indexer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// serviceMetrics are the ingestion metrics; the per-instance ones are read from the
// published view at scrape time, so a gone instance's series disappear with it.
type serviceMetrics struct {
	gaps, snapshots, snapshotErrors prometheus.Counter
	decodeErrors, duplicates        prometheus.Counter
	bufferOverflows                 prometheus.Counter
	lag                             prometheus.Histogram
	fleetHitRate                    prometheus.Gauge

	blocksDesc, stateDesc, hitRateDesc, warmupDesc *prometheus.Desc
	s                                              *Service
}

func newServiceMetrics(s *Service, reg prometheus.Registerer) (*serviceMetrics, error) {
	m := &serviceMetrics{
		s: s,
		gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_index_gaps_total",
			Help: "Seq gaps, lost history or heartbeats ahead of the applied batches, each answered by a snapshot."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_index_snapshots_total",
			Help: "Agent snapshots applied (spliced with the batches buffered meanwhile)."}),
		snapshotErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_index_snapshot_errors_total",
			Help: "Snapshot requests that failed (timeout, no agent, agent error); retried with backoff."}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_index_decode_errors_total",
			Help: "NATS messages that were not a valid EventBatch or Heartbeat (dropped)."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_index_stale_batches_total",
			Help: "Batches ignored because their (epoch, seq) was already applied."}),
		bufferOverflows: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_index_buffer_overflows_total",
			Help: "Times the per-instance buffer of batches waiting for a snapshot overflowed (dropped, resynced)."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_index_ingestion_lag_seconds",
			Help:    "Now minus the batch's engine timestamp (or the agent's send time) when the index handles it.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}}),
		fleetHitRate: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_index_fleet_hit_rate",
			Help: "Engine-reported prefix-cache hit rate (tokens) of the whole fleet over the warm-up window."}),
		blocksDesc: prometheus.NewDesc("kvroute_index_instance_blocks",
			"Blocks (keys) the index holds for the instance.", []string{"instance"}, nil),
		stateDesc: prometheus.NewDesc("kvroute_index_instance_state",
			"1 for the instance's current state, 0 for the others.", []string{"instance", "state"}, nil),
		hitRateDesc: prometheus.NewDesc("kvroute_index_instance_hit_rate",
			"Engine-reported prefix-cache hit rate of the instance over the warm-up window.", []string{"instance"}, nil),
		warmupDesc: prometheus.NewDesc("kvroute_index_instance_warmup_seconds",
			"Seconds from join until the instance's hit rate first reached the fleet's (absent while not warm).", []string{"instance"}, nil),
	}
	for _, c := range []prometheus.Collector{m.gaps, m.snapshots, m.snapshotErrors, m.decodeErrors, m.duplicates,
		m.bufferOverflows, m.lag, m.fleetHitRate, m} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("indexer: register metrics: %w", err)
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector for the per-instance series.
func (m *serviceMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.blocksDesc
	ch <- m.stateDesc
	ch <- m.hitRateDesc
	ch <- m.warmupDesc
}

// Collect implements prometheus.Collector.
func (m *serviceMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, in := range m.s.Instances() {
		ch <- prometheus.MustNewConstMetric(m.blocksDesc, prometheus.GaugeValue, float64(in.Blocks), in.ID)
		for _, st := range allStates {
			v := 0.0
			if in.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.stateDesc, prometheus.GaugeValue, v, in.ID, st.String())
		}
		ch <- prometheus.MustNewConstMetric(m.hitRateDesc, prometheus.GaugeValue, in.Warmup.HitRate, in.ID)
		if in.Warmup.Warm {
			ch <- prometheus.MustNewConstMetric(m.warmupDesc, prometheus.GaugeValue, in.Warmup.WarmupTime.Seconds(), in.ID)
		}
	}
}
