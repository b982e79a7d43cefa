package sim

import (
	"testing"
	"time"
)

// prefillTTFT is the simulated TTFT the cost model predicts for a request alone on an
// idle engine: ceil(uncached/budget) prefill steps, each costing base + a·chunk +
// c·context (the context grows by each chunk, from the cached prefix on).
func prefillTTFT(c CostModel, cached, total, budget int) time.Duration {
	var d time.Duration
	for done := cached; done < total; {
		n := min(total-done, budget)
		done += n
		d += c.Step(n, 0, done)
	}
	return d
}

func TestTTFTFollowsTheCostModel(t *testing.T) {
	cfg := testConfig()
	s := startServer(t, cfg)
	var prev time.Duration
	for i, n := range []int{100, 600, 2000} {
		g := generate(t, s, seqTokens(10000*(i+1), n), "", "", 1)
		want := prefillTTFT(cfg.Cost, 0, n, cfg.MaxNumBatchedTokens)
		if g.TTFT != want {
			t.Fatalf("%d uncached tokens: TTFT %v, want %v", n, g.TTFT, want)
		}
		if g.TTFT <= prev {
			t.Fatalf("TTFT did not grow with uncached tokens: %v after %v", g.TTFT, prev)
		}
		prev = g.TTFT
	}
}

// A cached 8k-token prefix cuts TTFT by exactly the ratio the 70B profile's cost model
// predicts: two 8k prefill chunks plus the suffix, against one step for the suffix.
func TestCachedPrefixCutsTTFTByTheModelledRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates the 70B profile's 75k-block pool")
	}
	cfg := testConfig()
	p, err := LookupProfile("llama-3.1-70b-h100-tp8")
	if err != nil {
		t.Fatal(err)
	}
	p.Apply(&cfg)
	s := startServer(t, cfg)
	prefix := seqTokens(1, 8192)
	first := generate(t, s, append(prefix[:8192:8192], seqTokens(100000, 200)...), "", "", 1)
	second := generate(t, s, append(prefix[:8192:8192], seqTokens(200000, 200)...), "", "", 1)
	if second.CachedTokens != 8192 {
		t.Fatalf("cached_tokens = %d, want 8192", second.CachedTokens)
	}
	wantCold := prefillTTFT(cfg.Cost, 0, 8392, cfg.MaxNumBatchedTokens)
	wantWarm := prefillTTFT(cfg.Cost, 8192, 8392, cfg.MaxNumBatchedTokens)
	if first.TTFT != wantCold || second.TTFT != wantWarm {
		t.Fatalf("TTFT cold %v warm %v, want %v and %v", first.TTFT, second.TTFT, wantCold, wantWarm)
	}
	ratio := float64(first.TTFT) / float64(second.TTFT)
	t.Logf("70B profile: cold %v, warm %v: the cached 8k prefix cuts TTFT %.1f×", first.TTFT, second.TTFT, ratio)
	if ratio < 5 {
		t.Fatalf("a cached 8k prefix should cut TTFT several-fold, got %.2f×", ratio)
	}
}

func TestTTFTGrowsWithTheQueue(t *testing.T) {
	cfg := testConfig()
	cfg.MaxNumSeqs = 1
	// Real (scaled) sleeps, so that the queued requests arrive while the first runs:
	// 300 steps of 2 ms simulated, slept at 1/20.
	cfg.TimeScale = 0.05
	s := startServer(t, cfg)
	var reqs []*request
	for i, out := range []int{300, 10, 10} {
		r, err := s.submit(seqTokens(5000*(i+1), 64), "", "", out)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	var ttfts []time.Duration
	for _, r := range reqs {
		eventually(t, "request done", func() bool { return r.snapshot().done })
		ttfts = append(ttfts, r.snapshot().ttft)
	}
	if !(ttfts[0] < ttfts[1] && ttfts[1] < ttfts[2]) {
		t.Fatalf("queued TTFTs do not grow: %v", ttfts)
	}
	// In simulated time, the second's first token comes after the first's 300 tokens,
	// the third's after the second's 10.
	first := func(i int) time.Duration { return reqs[i].arrivalSim + ttfts[i] }
	if first(1)-first(0) < 299*cfg.Cost.StepBase || first(2)-first(1) < 9*cfg.Cost.StepBase {
		t.Fatalf("queue waits too short: TTFTs %v, first tokens at %v %v %v", ttfts, first(0), first(1), first(2))
	}
}

func TestPreemptionWhenBlocksRunOut(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 8 // 128 tokens
	cfg.TimeScale = 0.05
	s := startServer(t, cfg)
	var reqs []*request
	for i := range 2 {
		r, err := s.submit(seqTokens(7000*(i+1), 40), "", "", 60)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	for _, r := range reqs {
		eventually(t, "request done", func() bool { return r.snapshot().done })
		if snap := r.snapshot(); snap.err != nil || snap.out != 60 {
			t.Fatalf("request ended with %d tokens, err %v", snap.out, snap.err)
		}
	}
	// 2 × (40 + 60) tokens cannot share 128 slots: one of them had to be preempted.
	if n := counterValue(t, s.m.set().preemptions); n < 1 {
		t.Fatalf("preemptions = %v, want ≥ 1", n)
	}
	if running, waiting, usage := s.Load(); running != 0 || waiting != 0 || usage != 0 {
		t.Fatalf("after the run: running %d waiting %d usage %v", running, waiting, usage)
	}
}

func TestTimeScaleSleeps(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps in real time")
	}
	cfg := testConfig()
	cfg.TimeScale = 0.5
	cfg.Cost = CostModel{StepBase: 20 * time.Millisecond}
	s := startServer(t, cfg)
	g := generate(t, s, seqTokens(1, 16), "", "", 5)
	// 5 steps of 20 ms simulated = 100 ms simulated, slept at half speed: ≥ 50 ms wall.
	// Simulated time also counts the loop's own wake-up delay, scaled up.
	if g.E2E < 100*time.Millisecond || g.E2E > 200*time.Millisecond {
		t.Fatalf("simulated E2E %v, want 100ms (plus the wake-up)", g.E2E)
	}
	if g.WallTTFT < 10*time.Millisecond {
		t.Fatalf("wall TTFT %v: the first 20 ms step should sleep 10 ms", g.WallTTFT)
	}
}
