package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/tokenizer"
)

// Deps are the parts a Router is built from. NATS may be nil in static mode (no replica
// sharing then); Tokenizer may be nil with TokenizerMode none, or when every prompt is
// given as token ids.
type Deps struct {
	NATS *nats.Conn
	// Index is the in-process prefix-block index (started by the caller). Nil: no cache
	// hits; instances then come from Config.Engines.
	Index     *indexer.Service
	Tokenizer tokenizer.Tokenizer
	Registry  prometheus.Registerer
	Log       *slog.Logger

	// index is the prefix-block index the router reads; nil runs without cache hits.
	index indexSource
}

// Router is the OpenAI-compatible routing proxy. Build it with New, serve Handler() (or
// let Start bind Config.ListenAddr), stop it with Close.
type Router struct {
	cfg     Config
	log     *slog.Logger
	nc      *nats.Conn
	tok     tokenizer.Tokenizer
	idx     indexSource
	policy  Policy
	invoke  Policy // /invocations: affinity on raw bytes, never the index
	pending *pending
	metrics *metrics
	gather  prometheus.Gatherer
	window  *window
	peers   *peers
	hot     *hotPrefixes // nil when pre-warming is off
	handler http.Handler

	fleet atomic.Pointer[fleet]

	mu        sync.Mutex
	instances map[string]*instance // every instance ever seen, by id
	nextSlot  uint32

	scratch sync.Pool // *reqState

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started atomic.Bool
	closed  atomic.Bool
	srv     *http.Server
	ln      net.Listener
}

// New validates cfg and builds a Router. It starts nothing: call Start.
func New(cfg Config, deps Deps) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Registry == nil {
		return nil, fmt.Errorf("%w: a prometheus registerer is required", ErrConfig)
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.index == nil && deps.Index != nil {
		deps.index = serviceIndex{deps.Index}
	}
	if deps.index == nil && len(cfg.Engines) == 0 {
		return nil, fmt.Errorf("%w: no instance source: give Deps.Index or Config.Engines", ErrConfig)
	}
	if cfg.TokenizerMode == TokenizerLocal && deps.Tokenizer == nil {
		return nil, fmt.Errorf("%w: tokenizer mode local needs Deps.Tokenizer", ErrConfig)
	}
	r := &Router{
		cfg:       cfg,
		log:       deps.Log.With("component", "router"),
		nc:        deps.NATS,
		tok:       deps.Tokenizer,
		idx:       deps.index,
		policy:    newPolicy(&cfg),
		invoke:    &HashAffinity{Threshold: cfg.ConcurrencyThreshold, Depth: 1, Fallback: Overflow{}},
		pending:   newPending(cfg.PendingMaxKeys),
		metrics:   newMetrics(deps.Registry),
		window:    newWindow(),
		instances: map[string]*instance{},
	}
	if cfg.Policy == PolicyRandom || cfg.Policy == PolicyLeastRequest {
		r.invoke = r.policy
	}
	if cfg.PrewarmPrefixes > 0 {
		r.hot = newHotPrefixes(max(4*cfg.PrewarmPrefixes, 16), cfg.MinMatchTokens, cfg.PrewarmMaxTokens, cfg.PrewarmHalfLife)
	}
	if g, ok := deps.Registry.(prometheus.Gatherer); ok {
		r.gather = g
	}
	if cfg.TokenizerMode == TokenizerEngine && r.tok == nil {
		r.tok = newEngineTokenizer(r)
	}
	r.scratch.New = func() any { return new(reqState) }
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if len(cfg.Engines) > 0 {
		list := make([]*instance, 0, len(cfg.Engines))
		for _, e := range cfg.Engines {
			in, _, err := r.instanceFor(staticID(e), e)
			if err != nil {
				return nil, fmt.Errorf("%w: engine %q: %v", ErrConfig, e, err)
			}
			list = append(list, in)
		}
		r.fleet.Store(buildFleet(list))
	} else {
		r.fleet.Store(buildFleet(nil))
	}
	if r.nc != nil {
		r.peers = newPeers(r)
	}
	r.handler = r.routes()
	return r, nil
}

// instanceFor returns the instance with this id and URL, creating it (or replacing one
// whose URL changed); created says it is new.
func (r *Router) instanceFor(id, rawURL string) (in *instance, created bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if in, ok := r.instances[id]; ok && in.rawURL == trimURL(rawURL) {
		return in, false, nil
	}
	r.nextSlot++
	in, err = newInstance(id, rawURL, r.nextSlot, &r.cfg)
	if err != nil {
		return nil, false, err
	}
	r.instances[id] = in
	return in, true, nil
}

// Handler serves every route: the OpenAI endpoints, /invocations, /healthz, /readyz,
// /api/stats and (when the registry is a Gatherer and MetricsPath is set) /metrics.
func (r *Router) Handler() http.Handler { return r.handler }

// Start launches the background work (discovery, health checks, load sharing) and, when
// Config.ListenAddr is set, binds it and serves Handler(). It returns once listening.
func (r *Router) Start(ctx context.Context) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if !r.started.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: already started", ErrConfig)
	}
	if ctx != nil {
		stop := context.AfterFunc(ctx, r.cancel)
		r.wg.Add(1)
		go func() { defer r.wg.Done(); <-r.ctx.Done(); stop() }()
	}
	if r.peers != nil {
		if err := r.peers.start(); err != nil {
			return err
		}
	}
	if r.cfg.ListenAddr != "" {
		ln, err := net.Listen("tcp", r.cfg.ListenAddr)
		if err != nil {
			return fmt.Errorf("router: listen %s: %w", r.cfg.ListenAddr, err)
		}
		r.ln = ln
		r.srv = &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				r.log.Error("http server stopped", "err", err)
			}
		}()
		r.log.Info("router listening", "addr", ln.Addr().String(), "policy", r.cfg.Policy)
	}
	if r.idx != nil && len(r.cfg.Engines) == 0 {
		r.refresh()
		kick := make(chan struct{}, 1)
		if s, ok := r.idx.(interface{ subscribe(func()) func() }); ok {
			cancel := s.subscribe(func() {
				select {
				case kick <- struct{}{}:
				default:
				}
			})
			r.wg.Add(1)
			go func() { defer r.wg.Done(); <-r.ctx.Done(); cancel() }()
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			t := time.NewTicker(r.cfg.InstanceRefreshInterval)
			defer t.Stop()
			for {
				select {
				case <-r.ctx.Done():
					return
				case <-t.C:
				case <-kick:
				}
				r.refresh()
			}
		}()
	}
	if len(r.cfg.Engines) > 0 {
		r.scrapeAll()
		r.loop(r.cfg.ScrapeInterval, r.scrapeAll)
	}
	r.loop(time.Second, r.housekeeping)
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.healthLoop(r.ctx) }()
	return nil
}

// loop runs f every period until the router stops.
func (r *Router) loop(period time.Duration, f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
}

// Addr is the bound HTTP address after Start (nil without ListenAddr).
func (r *Router) Addr() net.Addr {
	if r.ln == nil {
		return nil
	}
	return r.ln.Addr()
}

// URL is http://<bound address>, or "" before Start / without ListenAddr.
func (r *Router) URL() string {
	if r.ln == nil {
		return ""
	}
	return "http://" + r.ln.Addr().String()
}

// Close stops the listener (letting requests in flight finish for up to 5 s), the
// background work and the NATS subscriptions. It does not close Deps.NATS.
func (r *Router) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	var err error
	if r.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = r.srv.Shutdown(ctx)
		cancel()
	}
	r.cancel()
	if r.peers != nil {
		r.peers.stop()
	}
	r.wg.Wait()
	r.mu.Lock()
	for _, in := range r.instances {
		in.client.CloseIdleConnections()
	}
	r.mu.Unlock()
	return err
}

// routes builds the mux.
func (r *Router) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", r.serveChat)
	mux.HandleFunc("POST /v1/completions", r.serveCompletion)
	mux.HandleFunc("GET /v1/models", r.serveModels)
	mux.HandleFunc("POST /invocations", r.serveInvocations)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", r.serveReady)
	mux.HandleFunc("GET /api/stats", r.serveStats)
	if r.gather != nil && r.cfg.MetricsPath != "" {
		mux.Handle("GET "+r.cfg.MetricsPath, promhttp.HandlerFor(r.gather, promhttp.HandlerOpts{}))
	}
	// Anything else gets an OpenAI-shaped 404, or 405 on a known path.
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/v1/chat/completions", "/v1/completions", "/invocations", "/v1/models", "/healthz", "/readyz", "/api/stats":
			openai.WriteError(w, openai.NewError(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed",
				fmt.Sprintf("method %s not allowed on %s", req.Method, req.URL.Path)))
		default:
			openai.WriteError(w, openai.NewError(http.StatusNotFound, "invalid_request_error", "not_found",
				fmt.Sprintf("no route %s %s", req.Method, req.URL.Path)))
		}
	})
	return mux
}

func (r *Router) serveReady(w http.ResponseWriter, _ *http.Request) {
	now := time.Now().UnixNano()
	n := 0
	for _, in := range r.fleet.Load().list {
		if in.health.available(now) && in.desc.Load() != nil {
			n++
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	if n == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("no healthy instance\n"))
		return
	}
	_, _ = fmt.Fprintf(w, "ready: %d instances\n", n)
}
