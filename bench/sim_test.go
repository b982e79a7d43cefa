package bench

import (
	"context"
	"net/http"
	"testing"

	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// TestDriverAgainstSimulator drives one real simulated engine directly (no router):
// the client's usage figures, the engine's /metrics counters and the oracle must agree
// when the cache never evicts and requests run one at a time.
func TestDriverAgainstSimulator(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	cfg.NumGPUBlocks = 4096
	cfg.KVEventsEnabled = false
	srv, err := sim.New(cfg, tok, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	wc, _ := DefaultWorkload(WorkloadSharedPrefix)
	wc.Requests, wc.Documents, wc.DocTokens, wc.QuestionTokens, wc.OutputTokens = 30, 3, 600, 40, 4
	tr, err := Generate(wc, NewText())
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := TracePrompts(ctx, tok, tr)
	if err != nil {
		t.Fatal(err)
	}
	oracle := Oracle(prompts, cfg.BlockSize)

	hc := &http.Client{}
	before, err := ScrapeCacheCounters(ctx, hc, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{BaseURL: srv.URL(), Client: hc, TimeScale: 1, Concurrency: 1}
	rr, err := d.Run(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	samples := rr.Samples
	after, err := ScrapeCacheCounters(ctx, hc, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	delta := after.Sub(before)
	var cached, prompt int
	for i, s := range samples {
		if !s.OK() {
			t.Fatalf("request %d: %+v", i, s)
		}
		if s.PromptTokens != len(prompts[i].IDs) {
			t.Fatalf("request %d: engine counted %d prompt tokens, the benchmark's tokenization %d", i, s.PromptTokens, len(prompts[i].IDs))
		}
		if s.CachedTokens != oracle.PerRequest[i] {
			t.Errorf("request %d: engine cached %d tokens, oracle %d", i, s.CachedTokens, oracle.PerRequest[i])
		}
		cached += s.CachedTokens
		prompt += s.PromptTokens
	}
	if delta.Queries != float64(prompt) || delta.Hits != float64(cached) {
		t.Fatalf("engine counters Δ %+v, usage sums hits %d queries %d", delta, cached, prompt)
	}
	if delta.HitRate() != oracle.HitRate() || oracle.HitRate() < 0.5 {
		t.Fatalf("engine hit rate %v, oracle %v", delta.HitRate(), oracle.HitRate())
	}
}
