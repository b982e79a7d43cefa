// Package dashboard serves kvroute's live dashboard: an embedded single-page UI at
// /dashboard/ and the JSON history it reads, /api/history. It samples a Source (the
// router's /api/stats snapshot, adapted by the caller) at a fixed interval and keeps a
// bounded history, so the page can draw curves (warm-up of new instances, hit rate,
// TTFT tails) without a metrics backend.
//
// The package only formats and remembers what its Source reports; it computes no routing
// figures itself and must not reach into the router or the index.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

// InstanceSample is one instance's state at one moment.
type InstanceSample struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// JoinedAtMs is when the index first heard of the instance (unix milliseconds).
	JoinedAtMs   int64  `json:"joined_at_ms"`
	CachedBlocks uint64 `json:"cached_blocks"`
	// HitRate is the engine-reported prefix-cache hit rate over the recent window, 0..1;
	// -1 when the instance has served no prompt tokens in the window.
	HitRate  float64 `json:"hit_rate"`
	InFlight int     `json:"in_flight"`
	Requests uint64  `json:"requests"`
	// TTFT percentiles over the recent window as the router measured them; -1 = no data.
	TTFTP50Seconds float64 `json:"ttft_p50_s"`
	TTFTP90Seconds float64 `json:"ttft_p90_s"`
	Warm           bool    `json:"warm"`
	// WarmupSeconds is the time from join until its hit rate reached the fleet's.
	WarmupSeconds float64 `json:"warmup_s"`
}

// FleetSample is the fleet's state at one moment.
type FleetSample struct {
	ReqPerSecond   float64 `json:"req_per_s"`
	HitRate        float64 `json:"hit_rate"`
	OverflowRatio  float64 `json:"overflow_ratio"`
	TTFTP50Seconds float64 `json:"ttft_p50_s"`
	TTFTP90Seconds float64 `json:"ttft_p90_s"`
	// EventLagSeconds: engine batch time → applied in the index, the worst instance's
	// moving average.
	EventLagSeconds float64 `json:"event_lag_s"`
	// Decisions counts routing decisions by kind since start; DecisionRate is per second
	// over the last sampling interval (computed here from consecutive samples).
	Decisions    map[string]uint64  `json:"decisions"`
	DecisionRate map[string]float64 `json:"decision_rate"`
}

// Sample is what a Source reports.
type Sample struct {
	TimeMs    int64            `json:"t"`
	Fleet     FleetSample      `json:"fleet"`
	Instances []InstanceSample `json:"instances"`
}

// Source returns the current state. It is called from one goroutine at a time.
type Source func() Sample

// point is one history entry, keyed by instance id for the charts.
type point struct {
	TimeMs    int64                     `json:"t"`
	Fleet     FleetSample               `json:"fleet"`
	Instances map[string]InstanceSample `json:"instances"`
}

// Stats is the /api/history document: the latest sample plus the history.
type Stats struct {
	Sample
	History []point `json:"history"`
}

// Config configures a Dashboard.
type Config struct {
	// SampleInterval between two samples.
	SampleInterval time.Duration
	// HistoryLength is how many samples are kept (HistoryLength × SampleInterval of history).
	HistoryLength int
}

// DefaultConfig keeps 10 minutes at one sample per second.
func DefaultConfig() Config { return Config{SampleInterval: time.Second, HistoryLength: 600} }

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("dashboard: invalid config")

// Validate checks the config.
func (c Config) Validate() error {
	if c.SampleInterval <= 0 || c.HistoryLength <= 0 {
		return ErrConfig
	}
	return nil
}

// Dashboard samples a Source and serves the UI and the API.
type Dashboard struct {
	cfg Config
	src Source

	mu      sync.RWMutex
	latest  Sample
	history []point // ring, oldest first after ordering
	next    int
	full    bool
}

// New returns a Dashboard; call Run to start sampling.
func New(cfg Config, src Source) (*Dashboard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Dashboard{cfg: cfg, src: src, history: make([]point, cfg.HistoryLength)}, nil
}

// Run samples until ctx is done.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.SampleInterval)
	defer t.Stop()
	d.SampleNow()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.SampleNow()
		}
	}
}

// SampleNow takes one sample immediately.
func (d *Dashboard) SampleNow() {
	s := d.src()
	if s.TimeMs == 0 {
		s.TimeMs = time.Now().UnixMilli()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if prev := d.latest; prev.TimeMs != 0 && s.TimeMs > prev.TimeMs {
		dt := float64(s.TimeMs-prev.TimeMs) / 1000
		s.Fleet.DecisionRate = make(map[string]float64, len(s.Fleet.Decisions))
		for k, v := range s.Fleet.Decisions {
			if p := prev.Fleet.Decisions[k]; v >= p {
				s.Fleet.DecisionRate[k] = float64(v-p) / dt
			}
		}
	}
	p := point{TimeMs: s.TimeMs, Fleet: s.Fleet, Instances: make(map[string]InstanceSample, len(s.Instances))}
	for _, in := range s.Instances {
		p.Instances[in.ID] = in
	}
	d.latest = s
	d.history[d.next] = p
	d.next = (d.next + 1) % len(d.history)
	if d.next == 0 {
		d.full = true
	}
}

// Stats returns the latest sample and the history, oldest first.
func (d *Dashboard) Stats() Stats {
	d.mu.RLock()
	defer d.mu.RUnlock()
	st := Stats{Sample: d.latest}
	if d.full {
		st.History = append(st.History, d.history[d.next:]...)
	}
	st.History = append(st.History, d.history[:d.next]...)
	return st
}

// Handler serves GET /dashboard/ (the UI) and GET /api/history (JSON). Mount it at
// "/dashboard/" and "/api/history", or at "/" on a mux of its own.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /dashboard/", http.StripPrefix("/dashboard/", http.FileServerFS(sub)))
	mux.Handle("GET /dashboard", http.RedirectHandler("/dashboard/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /api/history", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(d.Stats())
	})
	return mux
}
