package indexer

import "time"

// hitSample is one heartbeat's cumulative prefix-cache counters (tokens).
type hitSample struct {
	at            time.Time
	hits, queries float64
}

// hitWindow keeps the samples of the last window and gives the deltas across it.
type hitWindow struct {
	samples []hitSample
}

// add records a sample; a counter that went down (engine restart) restarts the window.
func (w *hitWindow) add(s hitSample, window time.Duration) {
	if n := len(w.samples); n > 0 {
		last := w.samples[n-1]
		if s.hits < last.hits || s.queries < last.queries {
			w.samples = w.samples[:0]
		}
	}
	w.samples = append(w.samples, s)
	// Keep one sample at or before the window's start so the deltas span the window.
	cut := s.at.Add(-window)
	drop := 0
	for drop+1 < len(w.samples) && !w.samples[drop+1].at.After(cut) {
		drop++
	}
	if drop > 0 {
		w.samples = append(w.samples[:0], w.samples[drop:]...)
	}
}

// delta returns hits and queries over the window.
func (w *hitWindow) delta() (hits, queries float64) {
	if len(w.samples) < 2 {
		return 0, 0
	}
	first, last := w.samples[0], w.samples[len(w.samples)-1]
	return last.hits - first.hits, last.queries - first.queries
}
