package router

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/openai"
)

func threeEngines(t *testing.T, adapters ...string) (*memIndex, []*testEngine) {
	idx := newMemIndex()
	tok := defaultTok(t)
	var es []*testEngine
	for i := range 3 {
		es = append(es, newTestEngine(t, fmt.Sprintf("e%d", i), tok, idx, adapters...))
	}
	return idx, es
}

func engineByID(es []*testEngine, id string) *testEngine {
	for _, e := range es {
		if e.id == id {
			return e
		}
	}
	return nil
}

// A repeated long prefix lands on its holder, and the engine's cached_tokens equals the
// router's prediction for every request.
func TestRepeatedPrefixLandsOnHolder(t *testing.T) {
	idx, es := threeEngines(t)
	r, reg := testRouter(t, DefaultConfig(), idx, defaultTok(t))
	fleetReady(t, r, 3)
	system := longText(1, 1500)
	first := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "question zero", ""))
	if first.code != 200 || first.decision != "affinity" {
		t.Fatalf("first request: %d %s %s", first.code, first.decision, first.body)
	}
	const n = 40
	for i := 1; i <= n; i++ {
		stream := ""
		if i%2 == 0 {
			stream = `,"stream":true`
		}
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("question number %d?", i), stream))
		if rep.code != 200 {
			t.Fatalf("request %d: %d %s", i, rep.code, rep.body)
		}
		if rep.instance != first.instance || rep.decision != "cache_hit" {
			t.Fatalf("request %d went to %s (%s), want %s (cache_hit)", i, rep.instance, rep.decision, first.instance)
		}
		u := engineByID(es, rep.instance).lastUsage.Load().(usage)
		if u.cached < 1000 {
			t.Fatalf("request %d: engine cached only %d of %d tokens", i, u.cached, u.prompt)
		}
	}
	exact := value(t, r.metrics.predictionMatches.WithLabelValues("exact"))
	total := exact + value(t, r.metrics.predictionMatches.WithLabelValues("under")) +
		value(t, r.metrics.predictionMatches.WithLabelValues("over"))
	if total != n+1 || exact/total < 0.99 {
		t.Fatalf("prediction exact for %v of %v requests, want ≥ 99%%", exact, total)
	}
	if got := value(t, r.metrics.predictedCached); got != value(t, r.metrics.engineCached) || got == 0 {
		t.Fatalf("predicted %v cached tokens, engines reported %v", got, value(t, r.metrics.engineCached))
	}
	if n := families(t, reg, "kvroute_router_requests_total"); n == 0 {
		t.Fatal("requests_total not exported")
	}
}

// Past the threshold the excess goes elsewhere, and that instance then holds the prefix too.
func TestOverflowMakesSecondHolder(t *testing.T) {
	idx, es := threeEngines(t)
	cfg := DefaultConfig()
	cfg.ConcurrencyThreshold = 2
	r, _ := testRouter(t, cfg, idx, defaultTok(t))
	fleetReady(t, r, 3)
	system := longText(2, 800)
	first := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "warm", ""))
	holder := engineByID(es, first.instance)
	release := make(chan struct{})
	holder.hold.Store(&release)
	var wg sync.WaitGroup
	replies := make([]reply, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("held %d", i), ""))
		}()
	}
	waitFor(t, "two requests in flight on the holder", func() bool { return r.fleet.Load().byID[holder.id].inFlight.Load() == 2 })
	over := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "one too many", ""))
	holder.hold.Store(nil)
	close(release)
	wg.Wait()
	if over.instance == holder.id || over.decision != "overflow" {
		t.Fatalf("past the threshold: went to %s (%s), want another instance by overflow", over.instance, over.decision)
	}
	for _, rep := range replies {
		if rep.instance != holder.id || rep.decision != "cache_hit" {
			t.Fatalf("held request: %s %s", rep.instance, rep.decision)
		}
	}
	// The overflow target is now a second holder: both predict the prefix cached.
	ctxReq, _ := openai.ParseChat([]byte(chatBody(system, "who holds it", "")))
	d, err := r.routeOpenAI(context.Background(), http.Header{}, ctxReq, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer r.release(d.st)
	holders := map[string]int{}
	for _, c := range d.st.cands {
		if c.CachedTokens > 0 {
			holders[c.ID] = c.CachedTokens
		}
	}
	if len(holders) != 2 || holders[holder.id] == 0 || holders[over.instance] == 0 || d.why != DecisionCacheHit {
		t.Fatalf("holders after overflow: %v (decision %s), want %s and %s", holders, d.why, holder.id, over.instance)
	}
}

// Reordered or re-spaced JSON routes the same, under every policy that hashes.
func TestReorderedJSONRoutesSame(t *testing.T) {
	for _, policy := range []string{PolicyKVAware, PolicyPrefixHash} {
		t.Run(policy, func(t *testing.T) {
			idx, _ := threeEngines(t)
			cfg := DefaultConfig()
			cfg.Policy = policy
			r, _ := testRouter(t, cfg, idx, defaultTok(t))
			fleetReady(t, r, 3)
			seen := map[string]bool{}
			for i := range 12 {
				sys := longText(100+i, 30)
				a := post(t, r.URL(), "/v1/chat/completions", fmt.Sprintf(`{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"system","content":%q},{"role":"user","content":"hi"}],"max_tokens":3}`, sys))
				b := post(t, r.URL(), "/v1/chat/completions", fmt.Sprintf("{\n  \"max_tokens\" : 3 ,\n\t\"messages\": [ {\"content\": %q, \"role\":\"system\"} , { \"content\":\"hi\",\"role\":\"user\"}],\n  \"model\":\"Qwen/Qwen3-0.6B\"\n}\n", sys))
				if a.code != 200 || b.code != 200 || a.instance != b.instance {
					t.Fatalf("prompt %d: %d %s vs %d %s", i, a.code, a.instance, b.code, b.instance)
				}
				seen[a.instance] = true
			}
			if len(seen) < 2 {
				t.Fatalf("12 distinct prompts all went to %v: affinity does not spread", seen)
			}
		})
	}
}

// Routing groups isolate: the same prompt in different groups spreads over instances,
// and within a group it sticks.
func TestGroupsIsolate(t *testing.T) {
	idx, _ := threeEngines(t)
	cfg := DefaultConfig()
	cfg.Policy = PolicyPrefixHash
	r, _ := testRouter(t, cfg, idx, defaultTok(t))
	fleetReady(t, r, 3)
	body := chatBody("the same system prompt for everyone", "hello", "")
	seen := map[string]string{}
	for g := range 16 {
		group := fmt.Sprintf("tenant-%d", g)
		a := post(t, r.URL(), "/v1/chat/completions", body, "X-Prefix-Aware-Id", group)
		b := post(t, r.URL(), "/v1/chat/completions", body, "X-Prefix-Aware-Id", group)
		if a.instance != b.instance {
			t.Fatalf("group %s moved from %s to %s", group, a.instance, b.instance)
		}
		// prompt_cache_key is the same group when no header is given.
		c := post(t, r.URL(), "/v1/chat/completions", chatBody("the same system prompt for everyone", "hello", fmt.Sprintf(`,"prompt_cache_key":%q`, group)))
		if c.instance != a.instance {
			t.Fatalf("prompt_cache_key %s went to %s, header to %s", group, c.instance, a.instance)
		}
		seen[a.instance] = group
	}
	if len(seen) < 2 {
		t.Fatalf("16 groups all on %v", seen)
	}
}

// cache_salt and adapters separate keys: a salted or adapter request never counts the
// base prefix as cached.
func TestSaltAndAdapterSeparateKeys(t *testing.T) {
	idx, es := threeEngines(t, "my-lora")
	r, _ := testRouter(t, DefaultConfig(), idx, defaultTok(t))
	fleetReady(t, r, 3)
	system := longText(3, 600)
	base := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "q0", ""))
	again := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "q1", ""))
	if again.decision != "cache_hit" || again.instance != base.instance {
		t.Fatalf("base repeat: %s %s", again.instance, again.decision)
	}
	for _, extra := range []string{`,"cache_salt":"tenant-a"`} {
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, "q2", extra))
		if rep.code != 200 || rep.decision == "cache_hit" {
			t.Fatalf("salted request: %d %s", rep.code, rep.decision)
		}
		if u := engineByID(es, rep.instance).lastUsage.Load().(usage); u.cached != 0 {
			t.Fatalf("salted request: engine reported %d cached", u.cached)
		}
		rep = post(t, r.URL(), "/v1/chat/completions", chatBody(system, "q3", extra))
		if rep.decision != "cache_hit" {
			t.Fatalf("salted repeat: %s", rep.decision)
		}
	}
	lora := strings.Replace(chatBody(system, "q4", ""), `"model":"Qwen/Qwen3-0.6B"`, `"model":"my-lora"`, 1)
	rep := post(t, r.URL(), "/v1/chat/completions", lora)
	if rep.code != 200 || rep.decision == "cache_hit" {
		t.Fatalf("adapter request: %d %s %s", rep.code, rep.decision, rep.body)
	}
	if u := engineByID(es, rep.instance).lastUsage.Load().(usage); u.cached != 0 {
		t.Fatalf("adapter request: engine reported %d cached", u.cached)
	}
	rep = post(t, r.URL(), "/v1/chat/completions", strings.Replace(lora, "q4", "q5", 1))
	if rep.decision != "cache_hit" {
		t.Fatalf("adapter repeat: %s", rep.decision)
	}
}

// A burst of siblings sent before any event arrives lands together (pending overlay).
func TestPendingOverlayGroupsBurst(t *testing.T) {
	idx, es := threeEngines(t)
	for _, e := range es {
		e.publish.Store(false) // the index never hears of anything
	}
	cfg := DefaultConfig()
	cfg.PendingConfirmGrace = time.Minute // keep entries for the whole test
	cfg.PendingTTL = time.Minute
	r, _ := testRouter(t, cfg, idx, defaultTok(t))
	fleetReady(t, r, 3)
	system := longText(4, 800)
	var first reply
	for i := range 6 {
		// different groups would scatter these by affinity; the overlay keeps them together
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody(system, fmt.Sprintf("sibling %d", i), ""), "X-Prefix-Aware-Id", fmt.Sprintf("g%d", i))
		if i == 0 {
			first = rep
			continue
		}
		if rep.instance != first.instance || rep.decision != "cache_hit" {
			t.Fatalf("sibling %d: %s (%s), want %s (cache_hit)", i, rep.instance, rep.decision, first.instance)
		}
	}
	if got := value(t, r.metrics.predictionMatches.WithLabelValues("exact")); got != 6 {
		t.Fatalf("pending predictions exact for %v of 6", got)
	}
}
