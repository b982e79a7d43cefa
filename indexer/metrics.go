package indexer

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// Instrumented is an Index decorator that exports the index's metrics on a registry:
// kvroute_index_keys, kvroute_index_entries and kvroute_index_evictions_total (read from
// Stats at scrape time), kvroute_index_events_applied_total (keys stored or removed
// through Store, Remove and Apply), kvroute_index_lookups_total and
// kvroute_index_lookup_duration_seconds (one lookup in LookupSampleEvery is timed).
type Instrumented struct {
	Index
	applied prometheus.Counter
	lookup  prometheus.Histogram
	lookups atomic.Uint64
	events  atomic.Uint64
	// base is the origin of the lookup timings: time.Since(base) reads only the
	// monotonic clock, where time.Now also reads the wall clock.
	base time.Time
}

// LookupSampleEvery is how many lookups Instrumented counts per lookup it times. A clock
// read costs about 35 ns on the virtual machines measured (two per timed lookup, plus
// ~15 ns for the histogram), i.e. 2–3% of a 512-block lookup if every lookup were timed;
// a systematic 1-in-16 sample keeps the latency distribution at a sixteenth of that.
const LookupSampleEvery = 16

var _ Index = (*Instrumented)(nil)

// NewInstrumented wraps idx and registers its metrics on reg.
func NewInstrumented(idx Index, reg prometheus.Registerer) (*Instrumented, error) {
	m := &Instrumented{
		Index: idx,
		base:  time.Now(),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvroute_index_events_applied_total",
			Help: "Block events (keys stored or removed) applied to the index.",
		}),
		lookup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvroute_index_lookup_duration_seconds",
			Help:    "Time of one index lookup of a request's key chain (a sample: one lookup in 16 is timed).",
			Buckets: []float64{250e-9, 500e-9, 1e-6, 2e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 1e-3},
		}),
	}
	cs := []prometheus.Collector{
		m.applied, m.lookup,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvroute_index_keys",
			Help: "Distinct block keys in the index.",
		}, func() float64 { return float64(idx.Stats().Keys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvroute_index_entries",
			Help: "(key, instance) pairs in the index.",
		}, func() float64 { return float64(idx.Stats().Entries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kvroute_index_lookups_total",
			Help: "Index lookups (every one; the duration histogram times a sample).",
		}, func() float64 { return float64(m.lookups.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kvroute_index_evictions_total",
			Help: "Keys evicted (least recently touched first) to stay within --max-keys.",
		}, func() float64 { return float64(idx.Stats().Evictions) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("indexer: register metrics: %w", err)
		}
	}
	return m, nil
}

// Store implements Index.
func (m *Instrumented) Store(instance string, keys []uint64) error {
	if err := m.Index.Store(instance, keys); err != nil {
		return err
	}
	m.count(len(keys))
	return nil
}

// Remove implements Index.
func (m *Instrumented) Remove(instance string, keys []uint64) {
	m.Index.Remove(instance, keys)
	m.count(len(keys))
}

// Apply implements Index.
func (m *Instrumented) Apply(b *kvroutev1.EventBatch) error {
	if err := m.Index.Apply(b); err != nil {
		return err
	}
	n := len(b.Removed)
	for _, s := range b.Stored {
		n += len(s.Keys)
	}
	m.count(n)
	return nil
}

func (m *Instrumented) count(n int) {
	m.events.Add(uint64(n))
	m.applied.Add(float64(n))
}

// Lookup implements Index, counting each call and timing one in LookupSampleEvery.
func (m *Instrumented) Lookup(keys []uint64, dst []Match) []Match {
	if m.lookups.Add(1)%LookupSampleEvery != 0 {
		return m.Index.Lookup(keys, dst)
	}
	start := time.Since(m.base)
	dst = m.Index.Lookup(keys, dst)
	m.lookup.Observe((time.Since(m.base) - start).Seconds())
	return dst
}

// Lookups returns how many lookups ran through the decorator.
func (m *Instrumented) Lookups() uint64 { return m.lookups.Load() }

// EventsApplied returns how many block events ran through the decorator.
func (m *Instrumented) EventsApplied() uint64 { return m.events.Load() }
