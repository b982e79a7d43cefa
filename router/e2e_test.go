package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/agent"
	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// stack is the real thing on one machine: an in-process NATS server, simulated engines
// with their agents, the index and the router.
type stack struct {
	nc      *nats.Conn
	natsURL string
	sims    []*sim.Server
	agents  []*agent.Agent
	index   *indexer.Service
	router  *Router
	byID    map[string]*sim.Server
	ctx     context.Context
	tok     tokenizer.Tokenizer
}

func testLog(t testing.TB) *slog.Logger {
	lv := slog.LevelWarn
	if os.Getenv("ROUTER_TEST_DEBUG") != "" {
		lv = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("test", t.Name())
}

func startNATS(t testing.TB) (string, *nats.Conn) {
	t.Helper()
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsutil.Connect(natsutil.ClientConfig{URL: srv.ClientURL(), Name: t.Name(), Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv.ClientURL(), nc
}

func startStack(t *testing.T, engines int, cfg Config) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &stack{byID: map[string]*sim.Server{}, ctx: ctx, tok: defaultTok(t)}
	s.natsURL, s.nc = startNATS(t)
	for range engines {
		s.addEngine(t)
	}
	icfg := indexer.DefaultConfig()
	idx, err := indexer.New(icfg, s.nc, prometheus.NewRegistry(), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idx.Close() })
	s.index = idx
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DebugHeaders = true
	cfg.InstanceRefreshInterval = 50 * time.Millisecond
	deps := Deps{NATS: s.nc, Index: idx, Tokenizer: s.tok, Registry: prometheus.NewRegistry(), Log: testLog(t)}
	if cfg.TokenizerMode != TokenizerLocal {
		deps.Tokenizer = nil
	}
	r, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	s.router = r
	waitFor(t, "router sees every engine", func() bool { return len(r.fleet.Load().list) == engines })
	return s
}

// addEngine starts one more simulated engine with its agent; it returns the agent's
// instance id.
func (s *stack) addEngine(t *testing.T) string {
	t.Helper()
	scfg := sim.DefaultConfig()
	scfg.NumGPUBlocks = 2048
	sv, err := sim.New(scfg, s.tok, prometheus.NewRegistry(), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sv.Close() })
	acfg := agent.DefaultConfig()
	acfg.EngineURL, acfg.ZMQEndpoint, acfg.ReplayEndpoint = sv.URL(), sv.EventsEndpoint(), sv.ReplayEndpoint()
	acfg.HeartbeatInterval = 100 * time.Millisecond
	a, err := agent.New(acfg, s.nc, prometheus.NewRegistry(), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	s.sims = append(s.sims, sv)
	s.agents = append(s.agents, a)
	s.byID[a.ID()] = sv
	return a.ID()
}

// holders returns, for a chat body, the instances the router predicts cache it.
func holders(t *testing.T, r *Router, body string) map[string]int {
	t.Helper()
	req, err := openai.ParseChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.routeOpenAI(context.Background(), http.Header{}, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer r.release(d.st)
	out := map[string]int{}
	for _, c := range d.st.cands {
		if c.CachedTokens > 0 {
			out[c.ID] = c.CachedTokens
		}
	}
	return out
}

// With simulated engines, agents, the index and NATS: a repeated long prefix lands on
// its holder and the engine's cached_tokens equals the prediction for ≥ 99% of requests;
// past the threshold the excess goes elsewhere and becomes a second holder; an engine
// that cuts a stream gives the client an error event and later requests avoid it.
func TestEndToEndWithSimulators(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ConcurrencyThreshold = 2
	cfg.EjectFailures = 1
	cfg.EjectCooldown = time.Minute
	cfg.HealthTimeout = 5 * time.Second // a loaded CI host answers slowly; only the stream cut may eject
	s := startStack(t, 3, cfg)
	r := s.router
	system := longText(42, 1500)
	first := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "first question", `,"max_tokens":4`))
	if first.code != 200 {
		t.Fatalf("first: %d %s", first.code, first.body)
	}
	const n = 60
	for i := 1; i <= n; i++ {
		extra := `,"max_tokens":4`
		if i%2 == 0 {
			extra += `,"stream":true`
		}
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("question %d, about item %d?", i, i*7), extra))
		if rep.code != 200 || rep.instance != first.instance || rep.decision != "cache_hit" {
			t.Fatalf("request %d: %d on %s (%s), want %s by cache_hit: %s", i, rep.code, rep.instance, rep.decision, first.instance, rep.body)
		}
	}
	exact := value(t, r.metrics.predictionMatches.WithLabelValues("exact"))
	total := exact + value(t, r.metrics.predictionMatches.WithLabelValues("under")) + value(t, r.metrics.predictionMatches.WithLabelValues("over"))
	if total < n || exact/total < 0.99 {
		t.Fatalf("engine cached_tokens == prediction for %v of %v requests, want ≥ 99%%", exact, total)
	}
	waitFor(t, "index holds the prefix", func() bool { return holders(t, r, chatBody(system, "probe", ""))[first.instance] >= 1400 })

	// Past the threshold: slow the holder down, fill it, and the next request overflows.
	holder := s.byID[first.instance]
	if err := holder.SetFaults(sim.Faults{SlowFactor: 40}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("slow %d", i), `,"max_tokens":16`))
			if rep.instance != first.instance {
				t.Errorf("filling request %d went to %s", i, rep.instance)
			}
		}()
	}
	waitFor(t, "holder at the threshold", func() bool { return r.fleet.Load().byID[first.instance].load() == 2 })
	over := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "overflowing", `,"max_tokens":4`))
	if over.code != 200 || over.instance == first.instance || over.decision != "overflow" {
		t.Fatalf("past the threshold: %d on %s (%s)", over.code, over.instance, over.decision)
	}
	wg.Wait()
	_ = holder.SetFaults(sim.Faults{})
	waitFor(t, "overflow target is a second holder", func() bool {
		h := holders(t, r, chatBody(system, "probe", ""))
		return h[first.instance] > 0 && h[over.instance] > 0
	})

	// An engine that dies mid-stream: the client gets an SSE error event; later requests
	// avoid it. The victim is wherever the router would send the request now.
	cutBody := chatBody(system, "cut me", `,"max_tokens":64,"stream":true`)
	victimID := nextInstance(t, r, cutBody)
	if err := s.byID[victimID].SetFaults(sim.Faults{CutStreamFraction: 1}); err != nil {
		t.Fatal(err)
	}
	cut := post(t, r.URL(), "/v1/chat/completions", cutBody)
	if cut.instance != victimID {
		t.Fatalf("cut request went to %s, want %s", cut.instance, victimID)
	}
	if !containsAll(cut.body, `"error"`, "mid-stream") {
		t.Fatalf("client got no error event:\n%s", cut.body)
	}
	for i := range 6 {
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("after %d", i), `,"max_tokens":4,"stream":true`))
		if rep.code != 200 || rep.instance == victimID || containsAll(rep.body, `"error"`) {
			t.Fatalf("request %d after the cut: %d on %s\n%s", i, rep.code, rep.instance, rep.body)
		}
	}
}

// nextInstance is where the router would send body now (a dry run: nothing is booked).
func nextInstance(t *testing.T, r *Router, body string) string {
	t.Helper()
	req, err := openai.ParseChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.routeOpenAI(context.Background(), http.Header{}, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer r.release(d.st)
	return d.inst().id
}

// Tokenizer mode engine: prompts are tokenized by an instance's /tokenize, and the
// predictions are just as exact.
func TestEndToEndEngineTokenizer(t *testing.T) {
	if testing.Short() {
		t.Skip("second full stack; the local-tokenizer stack covers -short")
	}
	cfg := DefaultConfig()
	cfg.TokenizerMode = TokenizerEngine
	s := startStack(t, 2, cfg)
	r := s.router
	system := longText(77, 900)
	first := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "q", `,"max_tokens":2`))
	for i := range 10 {
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("q%d", i), `,"max_tokens":2`))
		if rep.code != 200 || rep.instance != first.instance || rep.decision != "cache_hit" {
			t.Fatalf("request %d: %d %s %s", i, rep.code, rep.instance, rep.decision)
		}
	}
	if exact := value(t, r.metrics.predictionMatches.WithLabelValues("exact")); exact != 11 {
		t.Fatalf("exact predictions %v of 11", exact)
	}
}

// The whole stack with pre-warming: a newcomer discovered from its agent's heartbeats
// takes no traffic until the hot prefixes were replayed to it; then the index shows it as
// a holder, and its first real request for a hot prefix, routed to it by cache hit,
// reports cached tokens equal to the router's prediction.
func TestEndToEndPrewarm(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PrewarmPrefixes = 2
	s := startStack(t, 2, cfg)
	r := s.router
	hot := []string{longText(801, 500), longText(802, 400)}
	for _, system := range hot {
		for q := range 3 {
			if rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("warm %d", q), `,"max_tokens":1`)); rep.code != 200 {
				t.Fatalf("traffic: %d %s", rep.code, rep.body)
			}
		}
	}
	id := s.addEngine(t)
	waitFor(t, "router discovers the newcomer", func() bool { return r.fleet.Load().byID[id] != nil })
	waitFor(t, "newcomer pre-warmed", func() bool {
		row, ok := rowOf(r, id)
		return ok && row.Prewarm != nil && !row.Prewarming
	})
	if row, _ := rowOf(r, id); row.Prewarm.OK != 2 {
		t.Fatalf("pre-warming: %+v", row.Prewarm)
	}
	for i, system := range hot {
		probe := chatBody(system, "probe", "")
		waitFor(t, "index shows the newcomer holding the prefix", func() bool { return holders(t, r, probe)[id] >= 300 })
		// Find a routing group whose tie-break between the two holders picks the newcomer.
		group := ""
		for g := range 64 {
			body := chatBody(system, fmt.Sprintf("real question %d", i), `,"max_tokens":1`)
			req, _ := openai.ParseChat([]byte(body))
			d, err := r.routeOpenAI(context.Background(), http.Header{"X-Prefix-Aware-Id": {fmt.Sprint("g", g)}}, req, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if d.inst().id == id && d.why == DecisionCacheHit {
				group = fmt.Sprint("g", g)
			}
			r.release(d.st)
			if group != "" {
				break
			}
		}
		if group == "" {
			t.Fatalf("hot prefix %d: no group routes to the newcomer by cache hit", i)
		}
		before := value(t, r.metrics.predictionMatches.WithLabelValues("exact"))
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("real question %d", i), `,"max_tokens":1`), "X-Prefix-Aware-Id", group)
		if rep.code != 200 || rep.instance != id || rep.decision != "cache_hit" {
			t.Fatalf("hot prefix %d: %d on %s (%s), want the newcomer by cache_hit", i, rep.code, rep.instance, rep.decision)
		}
		var out struct {
			Usage usageJSON `json:"usage"`
		}
		if err := json.Unmarshal([]byte(rep.body), &out); err != nil || out.Usage.Details == nil || out.Usage.Details.CachedTokens < 300 {
			t.Fatalf("hot prefix %d: the newcomer's first real request reports %s", i, rep.body)
		}
		if after := value(t, r.metrics.predictionMatches.WithLabelValues("exact")); after != before+1 {
			t.Fatalf("hot prefix %d: engine's cached tokens %d differ from the prediction", i, out.Usage.Details.CachedTokens)
		}
	}
}
