package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/fleet"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// TestFleetMetrics starts a small real fleet in process (embedded NATS, two simulated vLLM
// engines with their agents, the index, the router), drives real requests through the router
// so that every family the dashboard and the rules read has samples — cache hits, a stream
// (TTFT), an overflow, an engine failure retried and relayed as a 500, a rejected request —
// then scrapes the router's /metrics (router, index, agents) and every engine's /metrics
// (vLLM's names) and checks the rules and the dashboard against what they really export:
// every metric, every label and every label value a query filters on. It also keeps
// testdata/golden/metrics.txt, which `go test -short` checks against, equal to the fleet
// (-update rewrites it).
func TestFleetMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet and loads the tokenizer (~20 s under -race); run without -short")
	}
	live := scrapeLiveFleet(t)
	t.Logf("the live fleet exports %d metric families", len(live.families))

	// The kit against the live fleet.
	loadRules(t, live)
	checkDashboardFile(t, live)

	if *update {
		if err := os.MkdirAll(filepath.Dir(metricsGolden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(metricsGolden, live.writeGolden(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden := goldenCatalog(t)
	for _, d := range golden.diff(live) {
		t.Errorf("%s (run go test ./deploy -run TestFleetMetrics -update)", d)
	}
}

// fleetLog discards the fleet's logs unless DEPLOY_TEST_DEBUG is set.
func fleetLog() *slog.Logger {
	if os.Getenv("DEPLOY_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// scrapeLiveFleet runs the fleet scenario and returns the catalog of what it exports.
func scrapeLiveFleet(t *testing.T) *catalog {
	t.Helper()
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := fleet.DefaultConfig()
	fc.Engines, fc.Profile, fc.TimeScale, fc.Seed = 2, "tiny", 0.1, 1
	fc.HeartbeatInterval = 200 * time.Millisecond
	fc.Router.DebugHeaders = true
	fc.Router.ConcurrencyThreshold = 1 // a second concurrent request for a prefix overflows
	fc.Router.PrewarmPrefixes = 2      // the engine that joins later is pre-warmed
	f, err := fleet.Start(ctx, fc, tok, nil, fleetLog())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := &fleetClient{t: t, url: f.URL(), hc: &http.Client{Timeout: 30 * time.Second}}

	// Cache hits: one long system prompt, different questions, until the index routes by it
	// and the engine confirms cached tokens (prediction checks).
	system := strings.Repeat("You answer questions about the kvroute fleet, its engines and their caches. ", 40)
	decisions := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; decisions[router.DecisionCacheHit.String()] < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no cache-hit routing after 30 s: decisions %v", decisions)
		}
		stream := i%2 == 1
		d, code := c.chat(system, fmt.Sprintf("Question %d: how warm is the cache?", i), 8, stream, nil)
		if code != http.StatusOK {
			t.Fatalf("chat %d: status %d", i, code)
		}
		decisions[d]++
		time.Sleep(50 * time.Millisecond) // let the agent publish the blocks
	}

	// Overflow: hold a slow stream on the prefix's instance, then ask for the prefix again.
	setFaults(t, f, sim.Faults{SlowFactor: 50})
	held := false
	_, code := c.chat(system, "A long answer, please.", 200, true, func(string) {
		held = true
		d, code := c.chat(system, "And a short one meanwhile.", 4, false, nil)
		if code != http.StatusOK {
			t.Errorf("overflow request: status %d", code)
		}
		decisions[d]++
	})
	setFaults(t, f, sim.Faults{})
	if !held {
		t.Fatalf("the held stream answered %d", code)
	}
	if decisions[router.DecisionOverflow.String()] == 0 {
		t.Errorf("no overflow decision with the prefix's instance at the concurrency threshold: %v", decisions)
	}

	// An engine failure: both engines fail, the router retries once and relays the 500.
	setFaults(t, f, sim.Faults{FailFraction: 1, FailStatus: 500})
	if _, code := c.chat(system, "This one fails.", 4, false, nil); code != http.StatusInternalServerError {
		t.Errorf("request with both engines failing: status %d, want 500", code)
	}
	setFaults(t, f, sim.Faults{})
	// A request the router rejects before routing (decision "none").
	if code := c.post("/v1/chat/completions", []byte(`{"model":`)); code != http.StatusBadRequest {
		t.Errorf("malformed body: status %d, want 400", code)
	}
	t.Logf("decisions: %v", decisions)

	// Scale-out: a third engine joins and is pre-warmed with the hot prefix.
	if err := f.AddEngines(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// Scrape until the families that follow the engines' heartbeats have samples (warm-up is
	// computed from the prefix-cache counters in the heartbeats).
	want := []string{"kvroute_index_instance_warmup_seconds", "kvroute_router_instance_warmup_seconds",
		"kvroute_router_prediction_checks_total", "kvroute_router_upstream_errors_total", "kvroute_router_ttft_seconds",
		"kvroute_router_prewarm_requests_total"}
	deadline = time.Now().Add(30 * time.Second)
	for {
		cat := newCatalog("the live fleet")
		cat.scrape(t, f.URL()+"/metrics", "")
		for _, e := range f.Engines() {
			cat.scrape(t, e.Sim.URL()+"/metrics", simOnlyPrefix)
		}
		var missing []string
		for _, name := range want {
			if cat.families[name] == nil {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			return cat
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the fleet still exports no %v", missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func setFaults(t *testing.T, f *fleet.Fleet, fl sim.Faults) {
	t.Helper()
	for _, e := range f.Engines() {
		if err := e.Sim.SetFaults(fl); err != nil {
			t.Fatal(err)
		}
	}
}

// simOnlyPrefix names the simulator's own figures: a real vLLM engine exports only the
// vllm: families, so the dashboard and the rules must not read kvroute_sim_*.
const simOnlyPrefix = "kvroute_sim_"

// scrape GETs a /metrics URL and adds what it exports, without the families named
// skipPrefix... (none when empty).
func (c *catalog) scrape(t *testing.T, url, skipPrefix string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := c.addExposition(resp.Body, skipPrefix); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// fleetClient sends OpenAI requests to the fleet's router.
type fleetClient struct {
	t   *testing.T
	url string
	hc  *http.Client
}

func (c *fleetClient) post(path string, body []byte) int {
	c.t.Helper()
	resp, err := c.hc.Post(c.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// chat sends a chat request and returns the router's decision and the status. For a stream,
// during (when not nil) runs after the first chunk arrived, while the request is in flight.
func (c *fleetClient) chat(system, user string, maxTokens int, stream bool, during func(decision string)) (string, int) {
	c.t.Helper()
	body, err := json.Marshal(map[string]any{
		"model": sim.DefaultModel, "max_tokens": maxTokens, "stream": stream,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.hc.Post(c.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	decision := resp.Header.Get(router.HeaderDecision)
	if stream && resp.StatusCode == http.StatusOK {
		r := bufio.NewReader(resp.Body)
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			c.t.Fatalf("stream: first line %q, %v", line, err)
		}
		if during != nil {
			during(decision)
		}
		_, _ = io.Copy(io.Discard, r)
		return decision, resp.StatusCode
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return decision, resp.StatusCode
}
