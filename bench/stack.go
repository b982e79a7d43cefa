package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/fleet"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/tokenizer"
)

// ErrStack is returned when the stack under test cannot be started or never gets ready.
var ErrStack = errors.New("bench: stack")

// stack is one policy's fresh system — internal/fleet's composition (embedded NATS,
// engines with agents, the index and the router, all in this process and over real
// sockets) — plus what only the benchmark needs: each engine's cache counters before any
// traffic and its join offset in the run.
type stack struct {
	fleet *fleet.Fleet
	reg   *prometheus.Registry
	url   string
	hc    *http.Client

	mu      sync.Mutex
	joinAt  time.Duration            // offset given to the engines being added
	joined  map[string]time.Duration // engine id → join offset (0 for the initial fleet)
	before  map[string]CacheCounters // engine id → counters when it started
	joinErr error                    // a failed join or starting-counter read
	joins   sync.WaitGroup
}

// routerConfig is the router of a benchmark run under policy.
func routerConfig(cfg *Config, policy string) router.Config {
	rc := router.DefaultConfig()
	rc.Policy = policy
	rc.DebugHeaders = true
	rc.RouterID = "bench"
	rc.MetricsPath = ""
	if cfg.ConcurrencyThreshold > 0 {
		rc.ConcurrencyThreshold = cfg.ConcurrencyThreshold
	}
	rc.PrewarmPrefixes = cfg.PrewarmPrefixes
	return rc
}

// startStack starts the fleet with engines engines and waits until the router sees every
// engine healthy.
func startStack(ctx context.Context, cfg *Config, policy string, engines int, tok tokenizer.Tokenizer, log *slog.Logger) (*stack, error) {
	s := &stack{reg: prometheus.NewRegistry(), joined: map[string]time.Duration{}, before: map[string]CacheCounters{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}}
	fc := fleet.DefaultConfig()
	fc.Engines, fc.Profile, fc.TimeScale, fc.NumGPUBlocks = engines, cfg.Profile, cfg.TimeScale, cfg.NumGPUBlocks
	fc.Seed = int64(cfg.Seed)
	fc.Router = routerConfig(cfg, policy)
	fc.NoDashboard = true
	fc.EngineStarted = func(e *fleet.Engine) {
		c, err := ScrapeCacheCounters(ctx, s.hc, e.Sim.URL())
		s.mu.Lock()
		defer s.mu.Unlock()
		s.joined[e.ID] = s.joinAt
		s.before[e.ID] = c
		if err != nil {
			s.joinErr = errors.Join(s.joinErr, fmt.Errorf("%w: %s's starting counters: %w", ErrStack, e.ID, err))
		}
	}
	f, err := fleet.Start(ctx, fc, tok, s.reg, log)
	if err != nil {
		s.hc.CloseIdleConnections()
		return nil, fmt.Errorf("%w: %w", ErrStack, err)
	}
	s.fleet, s.url = f, f.URL()
	s.mu.Lock()
	err = s.joinErr
	s.mu.Unlock()
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// join adds n engines in the background (the load keeps running) and waits until the
// router sees them; at is their join offset in the run. Errors surface through joinError.
func (s *stack) join(ctx context.Context, n int, at time.Duration) {
	s.joins.Add(1)
	go func() {
		defer s.joins.Done()
		s.mu.Lock()
		s.joinAt = at
		s.mu.Unlock()
		if err := s.fleet.AddEngines(ctx, n); err != nil {
			s.mu.Lock()
			s.joinErr = errors.Join(s.joinErr, fmt.Errorf("%w: join: %w", ErrStack, err))
			s.mu.Unlock()
		}
	}()
}

func (s *stack) joinError() error {
	s.joins.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joinErr
}

// counters returns the fleet's cache counters accumulated since each engine's start.
func (s *stack) counters(ctx context.Context) (CacheCounters, error) {
	var sum CacheCounters
	for _, e := range s.fleet.Engines() {
		c, err := ScrapeCacheCounters(ctx, s.hc, e.Sim.URL())
		if err != nil {
			return CacheCounters{}, err
		}
		s.mu.Lock()
		b := s.before[e.ID]
		s.mu.Unlock()
		sum = sum.Add(c.Sub(b))
	}
	return sum, nil
}

// joinOffsets maps each engine id to its join offset.
func (s *stack) joinOffsets() map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Duration, len(s.joined))
	for id, at := range s.joined {
		out[id] = at
	}
	return out
}

// close waits for pending joins and stops the fleet.
func (s *stack) close() {
	s.joins.Wait()
	s.fleet.Close()
	s.hc.CloseIdleConnections()
}
