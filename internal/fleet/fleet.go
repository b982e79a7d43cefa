// Package fleet composes a whole kvroute system in one process: an embedded NATS server,
// simulated vLLM engines each with its agent, the prefix-block index (with its gRPC API),
// the router and the live dashboard, all over real sockets. `kvroute demo` runs it; tests
// and benchmarks use it to exercise the real stack end to end.
//
// It wires the components together and nothing more: no routing, indexing or engine
// logic lives here.
package fleet

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
	"github.com/kvroute/kvroute/internal/dashboard"
	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// ErrFleet wraps every failure to start or grow the fleet.
var ErrFleet = errors.New("fleet")

// Config configures a Fleet.
type Config struct {
	// Engines is the number of simulated engines started with the fleet.
	Engines int
	// Profile names the simulator profile (sim.Profiles()); TimeScale and NumGPUBlocks
	// override it when non-zero.
	Profile      string
	TimeScale    float64
	NumGPUBlocks int
	// Seed makes the engines' random choices repeatable (engine i uses Seed·1000+i+1).
	Seed int64
	// HeartbeatInterval of the agents.
	HeartbeatInterval time.Duration

	// ListenAddr is the router's HTTP address (API, /metrics, /dashboard/, /api/stats);
	// "127.0.0.1:0" picks a free port.
	ListenAddr string
	// GRPCListenAddr serves the index's gRPC API; "" = off.
	GRPCListenAddr string
	// NATSHost and NATSPort of the embedded NATS server; port -1 picks a free one.
	NATSHost string
	NATSPort int

	Router    router.Config
	Indexer   indexer.Config
	Dashboard dashboard.Config
	// NoDashboard leaves the dashboard out (no sampling goroutine, no /dashboard/ routes).
	NoDashboard bool

	// EngineStarted, when set, is called once each engine's HTTP server listens and
	// before its agent starts (e.g. to read its counters before any traffic). It runs on
	// the goroutine that adds the engine.
	EngineStarted func(e *Engine)
}

// DefaultConfig is a 4-engine fleet on free loopback ports with the tiny profile.
func DefaultConfig() Config {
	rc := router.DefaultConfig()
	rc.RouterID = "fleet"
	return Config{
		Engines: 4, Profile: "tiny", HeartbeatInterval: 500 * time.Millisecond,
		ListenAddr: "127.0.0.1:0", NATSHost: "127.0.0.1", NATSPort: -1,
		Router: rc, Indexer: indexer.DefaultConfig(), Dashboard: dashboard.DefaultConfig(),
	}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	if c.Engines < 0 {
		return fmt.Errorf("%w: engines %d: want ≥ 0", ErrFleet, c.Engines)
	}
	if _, err := sim.LookupProfile(c.Profile); err != nil {
		return fmt.Errorf("%w: %w", ErrFleet, err)
	}
	if c.TimeScale < 0 || c.NumGPUBlocks < 0 {
		return fmt.Errorf("%w: time scale and GPU blocks must be ≥ 0", ErrFleet)
	}
	if c.HeartbeatInterval <= 0 {
		return fmt.Errorf("%w: heartbeat interval must be positive", ErrFleet)
	}
	if c.NoDashboard {
		return nil
	}
	return c.Dashboard.Validate()
}

// Engine is one simulated engine with its agent.
type Engine struct {
	ID       string
	Sim      *sim.Server
	Agent    *agent.Agent
	JoinedAt time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// Fleet is a running system.
type Fleet struct {
	cfg Config
	tok tokenizer.Tokenizer
	log *slog.Logger
	reg *prometheus.Registry

	nats  *server.Server
	conns []*nats.Conn
	idx   *indexer.Service
	grpc  *indexer.GRPCEndpoint
	rt    *router.Router
	dash  *dashboard.Dashboard
	httpd *http.Server
	ln    net.Listener
	// bg outlives the caller's context so that Close can stop the parts in order
	// (agents before their engines) instead of all at once when the caller's ctx ends.
	bg   context.Context
	stop context.CancelFunc

	grow    sync.Mutex // serializes AddEngines, so concurrent calls get distinct engine ids
	mu      sync.Mutex
	engines []*Engine
}

// Start brings the fleet up and returns once the router sees every engine healthy.
// The registry receives the router's, the index's and (labelled by agent) the agents'
// metrics; nil makes a new one.
func Start(ctx context.Context, cfg Config, tok tokenizer.Tokenizer, reg *prometheus.Registry, log *slog.Logger) (_ *Fleet, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if log == nil {
		log = slog.Default()
	}
	f := &Fleet{cfg: cfg, tok: tok, log: log, reg: reg}
	f.bg, f.stop = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	ns, err := natsutil.StartServer(natsutil.ServerConfig{Host: cfg.NATSHost, Port: cfg.NATSPort})
	if err != nil {
		return nil, fmt.Errorf("%w: nats: %w", ErrFleet, err)
	}
	f.nats = ns
	ncIdx, err := f.connect("kvroute-index")
	if err != nil {
		return nil, err
	}
	if f.idx, err = indexer.New(cfg.Indexer, ncIdx, reg, log.With("component", "index")); err != nil {
		return nil, fmt.Errorf("%w: index: %w", ErrFleet, err)
	}
	if err := f.idx.Start(f.bg); err != nil {
		return nil, fmt.Errorf("%w: index: %w", ErrFleet, err)
	}
	if cfg.GRPCListenAddr != "" {
		g := indexer.NewGRPCServer(f.idx, tok, log.With("component", "grpc"))
		if f.grpc, err = g.Serve(indexer.GRPCConfig{ListenAddr: cfg.GRPCListenAddr}); err != nil {
			return nil, fmt.Errorf("%w: grpc: %w", ErrFleet, err)
		}
	}
	ncRt, err := f.connect("kvroute-router")
	if err != nil {
		return nil, err
	}
	rc := cfg.Router
	rc.ListenAddr = "" // served below, together with the dashboard
	if f.rt, err = router.New(rc, router.Deps{NATS: ncRt, Index: f.idx, Tokenizer: tok, Registry: reg, Log: log.With("component", "router")}); err != nil {
		return nil, fmt.Errorf("%w: router: %w", ErrFleet, err)
	}
	if err := f.rt.Start(f.bg); err != nil {
		return nil, fmt.Errorf("%w: router: %w", ErrFleet, err)
	}
	if !cfg.NoDashboard {
		if f.dash, err = dashboard.New(cfg.Dashboard, dashboard.FromRouter(f.rt)); err != nil {
			return nil, err
		}
		go f.dash.Run(f.bg)
	}

	if f.ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
		return nil, fmt.Errorf("%w: listen %s: %w", ErrFleet, cfg.ListenAddr, err)
	}
	f.httpd = &http.Server{Handler: dashboard.RouterHandler(f.rt, f.dash), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.httpd.Serve(f.ln) }()

	if err := f.AddEngines(ctx, cfg.Engines); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Fleet) connect(name string) (*nats.Conn, error) {
	nc, err := natsutil.Connect(natsutil.ClientConfig{URL: f.nats.ClientURL(), Name: name, Log: f.log})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFleet, err)
	}
	f.mu.Lock()
	f.conns = append(f.conns, nc)
	f.mu.Unlock()
	return nc, nil
}

// AddEngines starts n more engines with their agents and waits until the router sees
// all of them healthy. Concurrent calls run one after the other.
func (f *Fleet) AddEngines(ctx context.Context, n int) error {
	f.grow.Lock()
	defer f.grow.Unlock()
	for range n {
		if err := f.addEngine(ctx); err != nil {
			return err
		}
	}
	return f.WaitHealthy(ctx, len(f.Engines()), 30*time.Second)
}

func (f *Fleet) addEngine(ctx context.Context) error {
	f.mu.Lock()
	i := len(f.engines)
	f.mu.Unlock()
	id := fmt.Sprintf("engine-%d", i)
	p, err := sim.LookupProfile(f.cfg.Profile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFleet, err)
	}
	sc := sim.DefaultConfig()
	p.Apply(&sc)
	if f.cfg.TimeScale > 0 {
		sc.TimeScale = f.cfg.TimeScale
	}
	if f.cfg.NumGPUBlocks > 0 {
		sc.NumGPUBlocks = f.cfg.NumGPUBlocks
	}
	sc.Seed = f.cfg.Seed*1000 + int64(i) + 1
	sc.HashSeed = id // every engine hashes differently, like separate vLLM processes
	s, err := sim.New(sc, f.tok, nil, f.log.With("component", "sim", "engine", id))
	if err != nil {
		return fmt.Errorf("%w: sim %s: %w", ErrFleet, id, err)
	}
	if err := s.Start(f.bg); err != nil {
		return fmt.Errorf("%w: sim %s: %w", ErrFleet, id, err)
	}
	e := &Engine{ID: id, Sim: s, JoinedAt: time.Now(), done: make(chan struct{})}
	f.mu.Lock()
	f.engines = append(f.engines, e)
	f.mu.Unlock()
	if f.cfg.EngineStarted != nil {
		f.cfg.EngineStarted(e)
	}
	nc, err := f.connect("kvroute-agent-" + id)
	if err != nil {
		return err
	}
	ac := agent.DefaultConfig()
	ac.EngineURL, ac.ZMQEndpoint, ac.ReplayEndpoint = s.URL(), s.EventsEndpoint(), s.ReplayEndpoint()
	ac.InstanceID, ac.Model, ac.HeartbeatInterval = id, sc.Model, f.cfg.HeartbeatInterval
	areg := prometheus.WrapRegistererWith(prometheus.Labels{"agent": id}, f.reg)
	a, err := agent.New(ac, nc, areg, f.log.With("component", "agent", "engine", id))
	if err != nil {
		return fmt.Errorf("%w: agent %s: %w", ErrFleet, id, err)
	}
	e.Agent = a
	actx, cancel := context.WithCancel(f.bg)
	e.cancel = cancel
	go func() {
		defer close(e.done)
		if err := a.Run(actx); err != nil && actx.Err() == nil {
			f.log.Warn("agent stopped", "engine", id, "err", err)
		}
	}()
	return nil
}

// WaitHealthy polls until the router has n healthy instances or the timeout passes.
func (f *Fleet) WaitHealthy(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		healthy := 0
		for _, in := range f.rt.Stats().Instances {
			if in.Healthy && !in.Ejected {
				healthy++
			}
		}
		if healthy >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the router sees %d healthy engines after %v, want %d", ErrFleet, healthy, timeout, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// URL is the router's base URL (http://host:port).
func (f *Fleet) URL() string { return "http://" + f.ln.Addr().String() }

// GRPCAddr is the index's gRPC address, or "" when off.
func (f *Fleet) GRPCAddr() string {
	if f.grpc == nil {
		return ""
	}
	return f.grpc.Addr()
}

// NATSURL is the embedded NATS server's client URL.
func (f *Fleet) NATSURL() string { return f.nats.ClientURL() }

// Router, Index and Dashboard (nil with NoDashboard) expose the components.
func (f *Fleet) Router() *router.Router          { return f.rt }
func (f *Fleet) Index() *indexer.Service         { return f.idx }
func (f *Fleet) Dashboard() *dashboard.Dashboard { return f.dash }

// Engines returns the engines in join order.
func (f *Fleet) Engines() []*Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Engine(nil), f.engines...)
}

// Close stops everything: the HTTP front first, then the router, each agent before its
// engine, the index and NATS last. It is safe on a partly started fleet.
func (f *Fleet) Close() {
	if f.httpd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = f.httpd.Shutdown(ctx)
		cancel()
	}
	if f.rt != nil {
		_ = f.rt.Close()
	}
	for _, e := range f.Engines() {
		if e.cancel != nil {
			e.cancel()
			<-e.done
		}
		_ = e.Sim.Close()
	}
	if f.grpc != nil {
		_ = f.grpc.Close()
	}
	if f.idx != nil {
		_ = f.idx.Close()
	}
	f.mu.Lock()
	for _, nc := range f.conns {
		nc.Close()
	}
	f.mu.Unlock()
	if f.nats != nil {
		f.nats.Shutdown()
	}
	f.stop()
}
