package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// startSim starts a simulated engine over real HTTP, without KV events (the hand-fed
// index does not read them).
func startSim(t *testing.T, tok tokenizer.Tokenizer, mut func(*sim.Config)) *sim.Server {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	cfg.KVEventsEnabled = false
	cfg.KVEventsReplayEndpoint = ""
	cfg.NumGPUBlocks = 2048
	if mut != nil {
		mut(&cfg)
	}
	sv, err := sim.New(cfg, tok, prometheus.NewRegistry(), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sv.Close() })
	return sv
}

// simInfo is how the hand-fed index announces a simulator.
func simInfo(id string, sv *sim.Server) instanceInfo {
	return instanceInfo{id: id, engineURL: sv.URL(), model: sv.Config().Model, adapters: sv.Config().LoRAAdapters,
		blockSize: sv.Config().BlockSize, routable: true, loadOK: true, idx: indexState{state: "ready"}}
}

// engineCached sends body straight to an engine and returns its usage.cached_tokens.
func engineCached(t *testing.T, url, body string) int {
	t.Helper()
	rep := post(t, url, "/v1/chat/completions", body)
	if rep.code != 200 {
		t.Fatalf("engine answered %d: %s", rep.code, rep.body)
	}
	var out struct {
		Usage usageJSON `json:"usage"`
	}
	if err := json.Unmarshal([]byte(rep.body), &out); err != nil || out.Usage.Details == nil {
		t.Fatalf("no usage in %s (%v)", rep.body, err)
	}
	return out.Usage.Details.CachedTokens
}

// sharedKeys is the oracle for a hot prefix: the block keys of what two chat requests
// with the same system prompt share, computed here from the tokenizer and kvblock alone.
func sharedKeys(t *testing.T, tok tokenizer.Tokenizer, a, b string) []uint64 {
	t.Helper()
	ids := func(body string) []uint32 {
		req, err := openai.ParseChat([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := req.Tokenize(context.Background(), tok)
		if err != nil {
			t.Fatal(err)
		}
		return res.IDs
	}
	x, y := ids(a), ids(b)
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return kvblock.Keys(nil, kvblock.Seed(tokenizer.DefaultModelName, "", ""), x[:n], 16)
}

func containsKeys(have, want []uint64) bool {
	for _, k := range want {
		if _, ok := slices.BinarySearch(have, k); !ok {
			return false
		}
	}
	return true
}

func rowOf(r *Router, id string) (InstanceStats, bool) {
	for _, row := range r.Stats().Instances {
		if row.ID == id {
			return row, true
		}
	}
	return InstanceStats{}, false
}

// candidateIDs is the candidate set the router would build for model now.
func candidateIDs(t *testing.T, r *Router, model string) []string {
	t.Helper()
	st := r.scratch.Get().(*reqState)
	defer r.release(st)
	if err := r.candidates(st, model, 0, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range st.cands {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// With real simulators over HTTP: after pre-warming, a newcomer's engine holds the hot
// prefixes (its first request for one reports cached tokens), but not a prompt seen only
// once; with pre-warming off the newcomer starts cold.
func TestPrewarmNewcomer(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("prewarm=%v", on), func(t *testing.T) {
			tok := defaultTok(t)
			idx := newMemIndex()
			for _, id := range []string{"old-a", "old-b"} {
				idx.setInstance(simInfo(id, startSim(t, tok, nil)))
			}
			cfg := DefaultConfig()
			if on {
				cfg.PrewarmPrefixes = 2
				cfg.PrewarmConcurrency = 2
			}
			r, reg := testRouter(t, cfg, idx, tok)
			fleetReady(t, r, 2)

			hot := []string{longText(501, 400), longText(502, 250)}
			cold := longText(503, 300)
			for i, system := range hot {
				for q := range 3 + 2*(1-i) { // the first prefix is the hottest
					rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("question %d?", q), `,"max_tokens":1`))
					if rep.code != 200 {
						t.Fatalf("traffic: %d %s", rep.code, rep.body)
					}
				}
			}
			post(t, r.URL(), "/v1/chat/completions", chatBody(cold, "once", `,"max_tokens":1`))
			if st := r.Stats(); on && st.Fleet.HotPrefixes != 2 {
				t.Fatalf("hot prefixes tracked: %d, want 2", st.Fleet.HotPrefixes)
			}

			newcomer := startSim(t, tok, nil)
			idx.setInstance(simInfo("newcomer", newcomer))
			fleetReady(t, r, 3)
			waitFor(t, "newcomer joined", func() bool {
				row, ok := rowOf(r, "newcomer")
				return ok && !row.Prewarming
			})
			row, _ := rowOf(r, "newcomer")
			okReplays := value(t, r.metrics.prewarmRequests.WithLabelValues(prewarmOK))
			if !on {
				if row.Prewarm != nil || okReplays != 0 || len(newcomer.KVBlockKeys()) != 0 {
					t.Fatalf("pre-warming off, yet %+v, %v replays, %d blocks cached", row.Prewarm, okReplays, len(newcomer.KVBlockKeys()))
				}
			} else {
				if p := row.Prewarm; p == nil || p.Prefixes != 2 || p.OK != 2 || p.Failed+p.Skipped != 0 || p.DurationSeconds <= 0 {
					t.Fatalf("newcomer's pre-warming: %+v", row.Prewarm)
				}
				if okReplays != 2 || value(t, r.metrics.prewarmDuration) != 1 {
					t.Fatalf("metrics: %v ok replays, %v durations", okReplays, value(t, r.metrics.prewarmDuration))
				}
				if families(t, reg, "kvroute_router_prewarm_duration_seconds") != 1 {
					t.Fatal("prewarm duration not exported")
				}
				// The engine's own cache (the simulator's oracle) holds exactly the shared
				// part of each hot prefix.
				have := newcomer.KVBlockKeys()
				for i, system := range hot {
					want := sharedKeys(t, tok, chatBody(system, "question 0?", ""), chatBody(system, "question 1?", ""))
					if len(want) < 10 || !containsKeys(have, want) {
						t.Fatalf("hot prefix %d: %d shared blocks, not all cached on the newcomer", i, len(want))
					}
				}
			}
			for i, system := range hot {
				got := engineCached(t, newcomer.URL(), chatBody(system, "a first real question", `,"max_tokens":1`))
				if on && got < 160 {
					t.Fatalf("pre-warmed newcomer: hot prefix %d has %d cached tokens", i, got)
				}
				if !on && got != 0 {
					t.Fatalf("cold newcomer: hot prefix %d has %d cached tokens", i, got)
				}
			}
			if got := engineCached(t, newcomer.URL(), chatBody(cold, "first", `,"max_tokens":1`)); got != 0 {
				t.Fatalf("a prompt seen once was replayed: %d cached", got)
			}
		})
	}
}

// A hot prefix under a cache_salt, and one for a LoRA adapter, are replayed with their
// salt and adapter: the newcomer caches them under the same keys the real requests use,
// and not under the unsalted base model.
func TestPrewarmSaltAndAdapter(t *testing.T) {
	tok := defaultTok(t)
	idx := newMemIndex()
	withLoRA := func(c *sim.Config) { c.LoRAAdapters = []string{"lora-x"} }
	idx.setInstance(simInfo("old", startSim(t, tok, withLoRA)))
	cfg := DefaultConfig()
	cfg.PrewarmPrefixes = 4
	r, _ := testRouter(t, cfg, idx, tok)
	fleetReady(t, r, 1)
	salted, adapted := longText(901, 300), longText(902, 300)
	asAdapter := func(body string) string {
		return strings.Replace(body, `"model":"`+tokenizer.DefaultModelName+`"`, `"model":"lora-x"`, 1)
	}
	for q := range 2 {
		for _, body := range []string{
			chatBody(salted, fmt.Sprint("q", q), `,"max_tokens":1,"cache_salt":"tenant-7"`),
			asAdapter(chatBody(adapted, fmt.Sprint("q", q), `,"max_tokens":1`)),
		} {
			if rep := post(t, r.URL(), "/v1/chat/completions", body); rep.code != 200 {
				t.Fatalf("traffic: %d %s", rep.code, rep.body)
			}
		}
	}
	newcomer := startSim(t, tok, withLoRA)
	idx.setInstance(simInfo("newcomer", newcomer))
	waitFor(t, "newcomer pre-warmed", func() bool {
		row, _ := rowOf(r, "newcomer")
		return row.Prewarm != nil && !row.Prewarming
	})
	if row, _ := rowOf(r, "newcomer"); row.Prewarm.OK != 2 {
		t.Fatalf("pre-warming: %+v", row.Prewarm)
	}
	// Unsalted / base-model twins first: they must find nothing (and cache their own keys,
	// which the salted and adapter requests below must not match either).
	if got := engineCached(t, newcomer.URL(), chatBody(salted, "x", `,"max_tokens":1`)); got != 0 {
		t.Fatalf("unsalted request hit the salted prefix: %d cached", got)
	}
	if got := engineCached(t, newcomer.URL(), chatBody(adapted, "x", `,"max_tokens":1`)); got != 0 {
		t.Fatalf("base-model request hit the adapter's prefix: %d cached", got)
	}
	if got := engineCached(t, newcomer.URL(), chatBody(salted, "y", `,"max_tokens":1,"cache_salt":"tenant-7"`)); got < 160 {
		t.Fatalf("salted request after pre-warming: %d cached", got)
	}
	if got := engineCached(t, newcomer.URL(), asAdapter(chatBody(adapted, "y", `,"max_tokens":1`))); got < 160 {
		t.Fatalf("adapter request after pre-warming: %d cached", got)
	}
}

// A newcomer whose replays fail, and one whose replays hang, still join: the failures
// are counted, the hanging one joins after the timeout, and until then no real request
// goes to it.
func TestPrewarmFailingNewcomerJoins(t *testing.T) {
	tok := defaultTok(t)
	idx := newMemIndex()
	idx.setInstance(simInfo("old", startSim(t, tok, nil)))
	cfg := DefaultConfig()
	cfg.PrewarmPrefixes = 2
	cfg.PrewarmConcurrency = 1
	cfg.PrewarmTimeout = 2 * time.Second
	r, _ := testRouter(t, cfg, idx, tok)
	fleetReady(t, r, 1)
	for i := range 2 {
		for q := range 2 {
			post(t, r.URL(), "/v1/chat/completions", chatBody(longText(600+i, 300), fmt.Sprint("q", q), `,"max_tokens":1`))
		}
	}

	failing := startSim(t, tok, func(c *sim.Config) { c.Faults = sim.Faults{FailFraction: 1} })
	hanging := startSim(t, tok, func(c *sim.Config) {
		c.TimeScale = 1
		c.Faults = sim.Faults{SlowFactor: 2000} // a 300-token prefill step takes seconds
	})
	idx.setInstance(simInfo("failing", failing))
	idx.setInstance(simInfo("hanging", hanging))
	fleetReady(t, r, 3)
	waitFor(t, "failing newcomer joined", func() bool {
		row, _ := rowOf(r, "failing")
		return row.Prewarm != nil && !row.Prewarming
	})
	if row, _ := rowOf(r, "failing"); row.Prewarm.Failed != 2 || row.Prewarm.OK != 0 {
		t.Fatalf("failing newcomer: %+v", row.Prewarm)
	}
	if got := value(t, r.metrics.prewarmRequests.WithLabelValues(prewarmError)); got != 2 {
		t.Fatalf("prewarm errors %v, want 2", got)
	}

	// While the hanging newcomer warms, real traffic goes elsewhere (the check needs the
	// timeout not to have passed yet; TestPrewarmOnlyNewcomersServe checks it for sure).
	if row, _ := rowOf(r, "hanging"); row.Prewarming {
		if got := candidateIDs(t, r, tokenizer.DefaultModelName); slices.Contains(got, "hanging") {
			t.Fatalf("candidates while pre-warming: %v", got)
		}
		for g := range 8 {
			rep := post(t, r.URL(), "/v1/chat/completions", chatBody("short", "q", `,"max_tokens":1`), "X-Prefix-Aware-Id", fmt.Sprint("g", g))
			if row, _ := rowOf(r, "hanging"); rep.instance == "hanging" && row.Prewarming {
				t.Fatal("a real request went to an instance being pre-warmed")
			}
		}
	} else {
		t.Log("the hanging newcomer joined before the check (loaded machine)")
	}
	waitFor(t, "hanging newcomer joined after the timeout", func() bool {
		row, _ := rowOf(r, "hanging")
		return !row.Prewarming
	})
	row, _ := rowOf(r, "hanging")
	if p := row.Prewarm; p.OK != 0 || p.Failed != 1 || p.Skipped != 1 || p.DurationSeconds < 1.9 {
		t.Fatalf("hanging newcomer: %+v", p)
	}
	if got := value(t, r.metrics.prewarmRequests.WithLabelValues(prewarmTimeout)); got != 1 {
		t.Fatalf("prewarm timeouts %v, want 1", got)
	}
	// ("failing" may be ejected by now: real requests failed on it.)
	if got := candidateIDs(t, r, tokenizer.DefaultModelName); !slices.Contains(got, "hanging") {
		t.Fatalf("candidates after joining: %v", got)
	}
}

// When only newcomers being pre-warmed serve a model, they take the request rather than
// the client getting 503; an instance that leaves mid-way stops its pre-warming.
func TestPrewarmOnlyNewcomersServe(t *testing.T) {
	tok := defaultTok(t)
	idx := newMemIndex()
	old := newTestEngine(t, "old", tok, idx)
	cfg := DefaultConfig()
	cfg.PrewarmPrefixes = 1
	cfg.PrewarmTimeout = time.Minute
	r, _ := testRouter(t, cfg, idx, tok)
	fleetReady(t, r, 1)
	system := longText(700, 200)
	for q := range 2 {
		post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprint("q", q), ""))
	}
	// A newcomer that holds every replay (token-id completions) but answers chats.
	release := make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-release:
		case <-req.Context().Done():
		}
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[],"usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}`))
	})
	nc := httptest.NewServer(mux)
	t.Cleanup(nc.Close)
	idx.setInstance(instanceInfo{id: "new", engineURL: nc.URL, model: tokenizer.DefaultModelName, blockSize: 16, routable: true})
	fleetReady(t, r, 2)
	waitFor(t, "newcomer pre-warming", func() bool { row, _ := rowOf(r, "new"); return row.Prewarming })
	if got := candidateIDs(t, r, tokenizer.DefaultModelName); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("candidates while the newcomer pre-warms: %v", got)
	}
	if rep := post(t, r.URL(), "/v1/chat/completions", chatBody("x", "y", "")); rep.instance != "old" {
		t.Fatalf("with the old instance up the request went to %s", rep.instance)
	}
	gone := old.info()
	gone.routable = false
	idx.setInstance(gone)
	fleetReady(t, r, 1)
	if rep := post(t, r.URL(), "/v1/chat/completions", chatBody("x", "y", "")); rep.code != 200 || rep.instance != "new" {
		t.Fatalf("only a pre-warming newcomer left: %d on %q, want 200 on new: %s", rep.code, rep.instance, rep.body)
	}
	// The newcomer leaves too: its pre-warming is canceled and counted so.
	left := instanceInfo{id: "new", engineURL: nc.URL, model: tokenizer.DefaultModelName, blockSize: 16}
	idx.setInstance(left)
	fleetReady(t, r, 0)
	waitFor(t, "canceled replay counted", func() bool {
		return value(t, r.metrics.prewarmRequests.WithLabelValues(prewarmCanceled)) == 1
	})
}

// The replay is a token-id completion with max_tokens=1 carrying model and cache_salt.
func TestReplayBody(t *testing.T) {
	b := replayBody(hotPrompt{model: "lora-\"a\"", salt: "tenant 1", ids: []uint32{1, 22, 333}})
	req, err := openai.ParseCompletion(b)
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if req.Model != `lora-"a"` || req.CacheSalt != "tenant 1" || !req.HasPromptIDs || !slices.Equal(req.PromptIDs, []uint32{1, 22, 333}) ||
		req.MaxTokens != 1 || req.Stream {
		t.Fatalf("replay body %s parsed as %+v", b, req)
	}
	if b := replayBody(hotPrompt{model: "m", ids: []uint32{7}}); strings.Contains(string(b), "cache_salt") {
		t.Fatalf("empty salt sent: %s", b)
	}
}

// Bad pre-warming settings are refused.
func TestPrewarmConfig(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"negative":    func(c *Config) { c.PrewarmPrefixes = -1 },
		"huge":        func(c *Config) { c.PrewarmPrefixes = maxPrewarmPrefixes + 1 },
		"timeout":     func(c *Config) { c.PrewarmPrefixes = 4; c.PrewarmTimeout = 0 },
		"concurrency": func(c *Config) { c.PrewarmPrefixes = 4; c.PrewarmConcurrency = 0 },
		"max tokens":  func(c *Config) { c.PrewarmPrefixes = 4; c.PrewarmMaxTokens = 8 },
		"half-life":   func(c *Config) { c.PrewarmPrefixes = 4; c.PrewarmHalfLife = 0 },
	} {
		cfg := DefaultConfig()
		cfg.Engines = []string{"http://127.0.0.1:1"}
		mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "prewarm") {
			t.Errorf("%s: got %v", name, err)
		}
	}
	cfg := DefaultConfig()
	cfg.PrewarmTimeout = 0 // irrelevant while off
	if err := cfg.Validate(); err != nil {
		t.Fatalf("pre-warming off: %v", err)
	}
}
