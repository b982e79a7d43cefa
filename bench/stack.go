package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/agent"
	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// ErrStack is returned when the stack under test cannot be started or never gets ready.
var ErrStack = errors.New("bench: stack")

// engineNode is one simulated engine with its agent.
type engineNode struct {
	id      string
	sim     *sim.Server
	agent   *agent.Agent
	cancel  context.CancelFunc
	done    chan struct{}
	started time.Duration // wall offset from the run start (0 for the initial fleet)
	before  CacheCounters // counters when the run (or its join) began
}

// stack is one policy's fresh system: embedded NATS, engines with agents, the index and
// the router, all in this process and over real sockets.
type stack struct {
	cfg    *Config
	policy string
	tok    tokenizer.Tokenizer
	log    *slog.Logger
	hc     *http.Client

	nats    *server.Server
	natsURL string
	conns   []*nats.Conn
	reg     *prometheus.Registry
	idx     *indexer.Service
	rt      *router.Router
	httpd   *http.Server
	url     string

	mu      sync.Mutex
	engines []*engineNode
	joinErr error
	joins   sync.WaitGroup
}

func (s *stack) connect(name string) (*nats.Conn, error) {
	nc, err := natsutil.Connect(natsutil.ClientConfig{URL: s.natsURL, Name: name, Log: s.log})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return nc, nil
}

// startStack starts NATS, the index, the router and engines engines, and waits until the
// router sees every engine healthy.
func startStack(ctx context.Context, cfg *Config, policy string, engines int, tok tokenizer.Tokenizer, log *slog.Logger) (_ *stack, err error) {
	s := &stack{cfg: cfg, policy: policy, tok: tok, log: log, reg: prometheus.NewRegistry(),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	ns, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		return s, fmt.Errorf("%w: nats: %w", ErrStack, err)
	}
	s.nats, s.natsURL = ns, ns.ClientURL()
	ncIdx, err := s.connect("bench-indexer")
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrStack, err)
	}
	s.idx, err = indexer.New(indexer.DefaultConfig(), ncIdx, s.reg, log.With("component", "indexer"))
	if err != nil {
		return s, fmt.Errorf("%w: indexer: %w", ErrStack, err)
	}
	if err := s.idx.Start(ctx); err != nil {
		return s, fmt.Errorf("%w: indexer start: %w", ErrStack, err)
	}
	ncRt, err := s.connect("bench-router")
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrStack, err)
	}
	rc := router.DefaultConfig()
	rc.Policy = policy
	rc.DebugHeaders = true
	rc.RouterID = "bench"
	rc.MetricsPath = ""
	if cfg.ConcurrencyThreshold > 0 {
		rc.ConcurrencyThreshold = cfg.ConcurrencyThreshold
	}
	s.rt, err = router.New(rc, router.Deps{NATS: ncRt, Index: s.idx, Tokenizer: tok, Registry: s.reg, Log: log.With("component", "router")})
	if err != nil {
		return s, fmt.Errorf("%w: router: %w", ErrStack, err)
	}
	if err := s.rt.Start(ctx); err != nil {
		return s, fmt.Errorf("%w: router start: %w", ErrStack, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return s, fmt.Errorf("%w: listen: %w", ErrStack, err)
	}
	s.url = "http://" + ln.Addr().String()
	s.httpd = &http.Server{Handler: s.rt.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.httpd.Serve(ln) }()
	for i := 0; i < engines; i++ {
		if err := s.addEngine(ctx, 0); err != nil {
			return s, err
		}
	}
	if err := s.waitHealthy(ctx, engines); err != nil {
		return s, err
	}
	return s, nil
}

// addEngine starts one simulated engine and its agent. at is its join offset in the run.
func (s *stack) addEngine(ctx context.Context, at time.Duration) error {
	s.mu.Lock()
	i := len(s.engines)
	s.mu.Unlock()
	id := fmt.Sprintf("engine-%d", i)
	sc := sim.DefaultConfig()
	p, err := sim.LookupProfile(s.cfg.Profile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStack, err)
	}
	p.Apply(&sc)
	sc.TimeScale = s.cfg.TimeScale
	if s.cfg.NumGPUBlocks > 0 {
		sc.NumGPUBlocks = s.cfg.NumGPUBlocks
	}
	sc.Seed = int64(s.cfg.Seed)*1000 + int64(i) + 1
	sc.HashSeed = fmt.Sprintf("bench-%d", i)
	srv, err := sim.New(sc, s.tok, nil, s.log.With("component", "sim", "engine", id))
	if err != nil {
		return fmt.Errorf("%w: sim %s: %w", ErrStack, id, err)
	}
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("%w: sim %s start: %w", ErrStack, id, err)
	}
	n := &engineNode{id: id, sim: srv, started: at, done: make(chan struct{})}
	s.mu.Lock()
	s.engines = append(s.engines, n)
	s.mu.Unlock()
	nc, err := s.connect("bench-agent-" + id)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStack, err)
	}
	ac := agent.DefaultConfig()
	ac.EngineURL = srv.URL()
	ac.ZMQEndpoint = srv.EventsEndpoint()
	ac.ReplayEndpoint = srv.ReplayEndpoint()
	ac.InstanceID = id
	ac.Model = sc.Model
	ac.HeartbeatInterval = 500 * time.Millisecond
	a, err := agent.New(ac, nc, prometheus.NewRegistry(), s.log.With("component", "agent", "engine", id))
	if err != nil {
		return fmt.Errorf("%w: agent %s: %w", ErrStack, id, err)
	}
	n.agent = a
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	go func() {
		defer close(n.done)
		if err := a.Run(actx); err != nil && actx.Err() == nil {
			s.log.Warn("agent stopped", "engine", id, "err", err)
		}
	}()
	c, err := ScrapeCacheCounters(ctx, s.hc, srv.URL())
	if err != nil {
		return err
	}
	n.before = c
	return nil
}

// join adds n engines in the background (the load keeps running) and waits until the
// router sees them; errors surface through joinError.
func (s *stack) join(ctx context.Context, n int, at time.Duration) {
	s.joins.Add(1)
	go func() {
		defer s.joins.Done()
		s.mu.Lock()
		want := len(s.engines) + n
		s.mu.Unlock()
		for i := 0; i < n; i++ {
			if err := s.addEngine(ctx, at); err != nil {
				s.mu.Lock()
				s.joinErr = err
				s.mu.Unlock()
				return
			}
		}
		if err := s.waitHealthy(ctx, want); err != nil {
			s.mu.Lock()
			s.joinErr = err
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

// waitHealthy polls the router until it has n healthy instances.
func (s *stack) waitHealthy(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		healthy := 0
		for _, in := range s.rt.Stats().Instances {
			if in.Healthy && !in.Ejected {
				healthy++
			}
		}
		if healthy >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the router sees %d healthy engines after 30 s, want %d", ErrStack, healthy, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// counters returns the fleet's cache counters accumulated since each engine's start.
func (s *stack) counters(ctx context.Context) (CacheCounters, error) {
	s.mu.Lock()
	nodes := append([]*engineNode(nil), s.engines...)
	s.mu.Unlock()
	var sum CacheCounters
	for _, n := range nodes {
		c, err := ScrapeCacheCounters(ctx, s.hc, n.sim.URL())
		if err != nil {
			return CacheCounters{}, err
		}
		sum = sum.Add(c.Sub(n.before))
	}
	return sum, nil
}

// joined maps each engine id to its join offset.
func (s *stack) joined() map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Duration, len(s.engines))
	for _, n := range s.engines {
		out[n.id] = n.started
	}
	return out
}

// close stops everything in reverse order of start.
func (s *stack) close() {
	s.joins.Wait()
	if s.httpd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.httpd.Shutdown(ctx)
		cancel()
	}
	if s.rt != nil {
		_ = s.rt.Close()
	}
	s.mu.Lock()
	nodes := append([]*engineNode(nil), s.engines...)
	s.mu.Unlock()
	for _, n := range nodes {
		if n.cancel != nil {
			n.cancel()
			<-n.done
		}
	}
	for _, n := range nodes {
		_ = n.sim.Close()
	}
	if s.idx != nil {
		s.idx.Close()
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	if s.nats != nil {
		s.nats.Shutdown()
	}
	s.hc.CloseIdleConnections()
}
