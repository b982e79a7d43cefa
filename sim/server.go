package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/tokenizer"
)

// Server is one simulated vLLM engine: its HTTP API, its engine loop and its KV-event
// sockets. Create it with New, then Start; Close stops everything.
type Server struct {
	cfg     Config
	tok     tokenizer.Tokenizer
	log     *slog.Logger
	reg     *prometheus.Registry // this server's own registry, served on /metrics
	m       *metrics
	eng     *engine
	pub     *publisher
	mux     *http.ServeMux
	filler  []string
	created int64

	mu      sync.Mutex
	started bool
	closed  bool
	ln      net.Listener
	srv     *http.Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New builds a Server. tok renders and tokenizes text prompts and chat messages (nil =
// only token-id prompts); reg, when not nil, also receives every metric (the server
// always serves its own on /metrics, so several servers may share a process: give each
// its own reg, or nil); log nil = discard.
func New(cfg Config, tok tokenizer.Tokenizer, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.LoRAAdapters = append([]string(nil), cfg.LoRAAdapters...)
	s := &Server{cfg: cfg, tok: tok, log: log, reg: prometheus.NewRegistry(), created: time.Now().Unix()}
	var eng *engine
	load := func() (int, int, float64) { return eng.load() }
	evictions := func() float64 {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		return float64(eng.pool.evictions)
	}
	var regs prometheus.Registerer = s.reg
	if reg != nil {
		regs = multiRegisterer{s.reg, reg}
	}
	m, err := newMetrics(regs, cfg.Model, load, evictions)
	if err != nil {
		return nil, fmt.Errorf("sim: register metrics: %w", err)
	}
	s.m = m
	if cfg.KVEventsEnabled {
		s.pub = newPublisher(cfg, m, log)
	}
	ids, words := fillerTokens(tok, cfg.Model)
	s.filler = words
	eng, err = newEngine(cfg, m, s.pub, log, ids)
	if err != nil {
		return nil, err
	}
	s.eng = eng
	s.mux = s.routes()
	return s, nil
}

// multiRegisterer registers every collector with each registerer.
type multiRegisterer []prometheus.Registerer

func (m multiRegisterer) Register(c prometheus.Collector) error {
	for i, r := range m {
		if err := r.Register(c); err != nil {
			for _, done := range m[:i] {
				done.Unregister(c)
			}
			return err
		}
	}
	return nil
}

func (m multiRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := m.Register(c); err != nil {
			panic(err)
		}
	}
}

func (m multiRegisterer) Unregister(c prometheus.Collector) bool {
	ok := true
	for _, r := range m {
		ok = r.Unregister(c) && ok
	}
	return ok
}

// Start binds the HTTP listener and the KV-event sockets and starts the engine loop.
// It returns once everything is bound; the server runs until Close (or ctx is done).
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return fmt.Errorf("%w: already started", ErrConfig)
	}
	ln, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("sim: listen %s: %w", s.cfg.ListenAddr, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if s.pub != nil {
		if err := s.pub.start(runCtx); err != nil {
			cancel()
			ln.Close()
			return err
		}
	}
	s.ln, s.cancel, s.started = ln, cancel, true
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.eng.run(runCtx)
	}()
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("sim: HTTP server stopped", "err", err)
		}
	}()
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				_ = s.Close()
			case <-runCtx.Done():
			}
		}()
	}
	s.log.Info("sim started", "url", s.URL(), "model", s.cfg.Model, "profile", s.cfg.Profile,
		"events", s.EventsEndpoint(), "replay", s.ReplayEndpoint(), "blocks", s.cfg.NumGPUBlocks,
		"block_size", s.cfg.BlockSize, "time_scale", s.cfg.TimeScale)
	return nil
}

// Close stops the server: in-flight requests end, sockets close.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()
	if !started {
		return nil
	}
	s.cancel()
	s.eng.shutdown() // requests in flight end now (503), so handlers return promptly
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	s.wg.Wait()
	if s.pub != nil {
		err = errors.Join(err, s.pub.close())
	}
	return err
}

// URL is the base URL of the HTTP API (http://host:port); "" before Start.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	a := s.ln.Addr().(*net.TCPAddr)
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(a.Port))
}

// EventsEndpoint is the KV-event PUB endpoint a subscriber dials (tcp://127.0.0.1:PORT
// for a bound wildcard), or the endpoint the server connects to; "" when events are off.
func (s *Server) EventsEndpoint() string {
	if s.pub == nil {
		return ""
	}
	return s.pub.eventsEP
}

// ReplayEndpoint is the replay ROUTER endpoint a DEALER dials; "" when replay is off.
func (s *Server) ReplayEndpoint() string {
	if s.pub == nil {
		return ""
	}
	return s.pub.replayEP
}

// Config returns the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// Handler returns the HTTP API, for callers that serve it themselves.
func (s *Server) Handler() http.Handler { return s.mux }

// Registry returns the server's own metric registry (what /metrics serves).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// KVBlockKeys returns the kvblock keys (kvblock.Seed(model, adapter, cache_salt)
// chained with kvblock.Extend over each block's tokens) of every block currently in the
// GPU prefix cache, sorted and without duplicates. It is the test oracle for agents,
// indexes and routers.
func (s *Server) KVBlockKeys() []uint64 { return s.eng.blockKeys() }

// SetFaults replaces the active faults.
func (s *Server) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.eng.setFaults(f)
	s.log.Info("faults set", "faults", fmt.Sprintf("%+v", f))
	return nil
}

// Faults returns the active faults.
func (s *Server) Faults() Faults { return s.eng.getFaults() }

// Restart simulates an engine restart: requests in flight fail, the cache is wiped
// without an event, the event seq restarts at 0, the metrics restart from zero, and
// block hashes change without a HashSeed.
func (s *Server) Restart() error { return s.eng.restart() }

// ResetPrefixCache drops every cached block and publishes AllBlocksCleared; it fails
// while requests hold blocks, as vLLM's does.
func (s *Server) ResetPrefixCache() error {
	if !s.eng.resetPrefixCache() {
		return fmt.Errorf("%w: prefix cache reset refused: blocks are in use by running requests", ErrBusy)
	}
	return nil
}

// Load reports the running and waiting requests and the KV-cache usage (0..1).
func (s *Server) Load() (running, waiting int, kvUsage float64) { return s.eng.load() }

// Generation is the outcome of Generate.
type Generation struct {
	PromptTokens, CompletionTokens, CachedTokens int
	// TTFT is in simulated time, WallTTFT in wall-clock time; E2E is simulated.
	TTFT, WallTTFT, E2E time.Duration
}

// Generate runs one request through the engine without HTTP: prompt token ids, the
// adapter ("" = base model), the cache salt, and the output length (0 = the default).
// It returns when the last token is generated.
func (s *Server) Generate(ctx context.Context, prompt []uint32, adapter, cacheSalt string, maxTokens int) (Generation, error) {
	r, err := s.submit(prompt, adapter, cacheSalt, maxTokens)
	if err != nil {
		return Generation{}, err
	}
	for {
		snap := r.snapshot()
		if snap.done {
			if snap.err != nil {
				return Generation{}, snap.err
			}
			return Generation{PromptTokens: r.numPrompt, CompletionTokens: snap.out, CachedTokens: snap.cached,
				TTFT: snap.ttft, WallTTFT: snap.ttftW, E2E: snap.e2e}, nil
		}
		select {
		case <-r.ch:
		case <-ctx.Done():
			s.eng.cancel(r)
			return Generation{}, ctx.Err()
		}
	}
}

// submit validates and queues a request.
func (s *Server) submit(prompt []uint32, adapter, salt string, maxTokens int) (*request, error) {
	s.mu.Lock()
	ok := s.started && !s.closed
	s.mu.Unlock()
	if !ok {
		return nil, ErrClosed
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrBadRequest)
	}
	if maxTokens <= 0 {
		maxTokens = s.cfg.DefaultMaxTokens
	}
	r := &request{
		tokens:    make([]uint32, len(prompt), len(prompt)+maxTokens),
		numPrompt: len(prompt), maxOut: maxTokens, lora: adapter, salt: salt,
		seed: kvblock.Seed(s.cfg.Model, adapter, salt),
	}
	copy(r.tokens, prompt)
	if err := s.eng.submit(r); err != nil {
		return nil, err
	}
	return r, nil
}

// fillerTokens picks the generated tokens: words the tokenizer encodes as one token
// each when there is a tokenizer, else fixed ids.
func fillerTokens(tok tokenizer.Tokenizer, model string) ([]uint32, []string) {
	words := []string{" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", " and", " runs", " away", " again"}
	ids := make([]uint32, 0, len(words))
	kept := make([]string, 0, len(words))
	if tok != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, w := range words {
			res, err := tok.Completion(ctx, model, w, false)
			if err != nil || len(res.IDs) != 1 {
				continue
			}
			ids, kept = append(ids, res.IDs[0]), append(kept, w)
		}
	}
	if len(ids) == 0 {
		kept = words
		for i := range words {
			ids = append(ids, uint32(1000+i))
		}
	}
	return ids, kept
}
