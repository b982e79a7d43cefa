package indexer

import (
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestInstrumentedLookupSampling checks that every lookup is counted and one in
// LookupSampleEvery is timed, with the lookups' results passed through unchanged.
func TestInstrumentedLookupSampling(t *testing.T) {
	x, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	reg := prometheus.NewRegistry()
	m, err := NewInstrumented(x, reg)
	must(t, err)
	chain := randKeys(rand.New(rand.NewPCG(1, 2)), 64)
	must(t, m.Store("a", chain))
	const n = 5*LookupSampleEvery + 3
	for range n {
		if got := m.Lookup(chain, nil); len(got) != 1 || got[0] != (Match{"a", 64}) {
			t.Fatalf("Lookup = %v", got)
		}
	}
	if m.Lookups() != n {
		t.Fatalf("Lookups() = %d, want %d", m.Lookups(), n)
	}
	families, err := reg.Gather()
	must(t, err)
	var count uint64
	var total float64
	var sum float64
	for _, f := range families {
		switch f.GetName() {
		case "kvroute_index_lookup_duration_seconds":
			h := f.GetMetric()[0].GetHistogram()
			count, sum = h.GetSampleCount(), h.GetSampleSum()
		case "kvroute_index_lookups_total":
			total = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if count != n/LookupSampleEvery || sum <= 0 {
		t.Fatalf("lookup histogram: %d samples summing to %gs, want %d samples > 0s", count, sum, n/LookupSampleEvery)
	}
	if total != n {
		t.Fatalf("kvroute_index_lookups_total = %g, want %d", total, n)
	}
}
