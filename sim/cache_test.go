package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/kvblock"
)

func generate(t *testing.T, s *Server, prompt []uint32, lora, salt string, maxTokens int) Generation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := s.Generate(ctx, prompt, lora, salt, maxTokens)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	return g
}

// expectedKeys is the oracle's oracle: kvblock keys of every full block of tokens.
func expectedKeys(model, lora, salt string, tokens []uint32, bs int) []uint64 {
	return kvblock.Keys(nil, kvblock.Seed(model, lora, salt), tokens, bs)
}

func sortedUnique(ks []uint64) []uint64 {
	ks = slices.Clone(ks)
	slices.Sort(ks)
	return slices.Compact(ks)
}

func TestRepeatHitsAndCachedTokens(t *testing.T) {
	s := startServer(t, testConfig())
	prompt := seqTokens(1, 100) // 6 full blocks + 4 tokens
	g := generate(t, s, prompt, "", "", 1)
	if g.CachedTokens != 0 || g.PromptTokens != 100 || g.CompletionTokens != 1 {
		t.Fatalf("first request: %+v", g)
	}
	// One output token: 101 tokens, the KV of 100 computed → 6 full blocks cached.
	want := sortedUnique(expectedKeys(DefaultModel, "", "", prompt, 16))
	if got := s.KVBlockKeys(); !slices.Equal(got, want) {
		t.Fatalf("KVBlockKeys = %v, want %v", got, want)
	}
	g = generate(t, s, prompt, "", "", 1)
	if g.CachedTokens != 96 {
		t.Fatalf("repeat: cached_tokens = %d, want 96", g.CachedTokens)
	}
	// A prompt of exactly 6 blocks hits only 5: vLLM always computes the last token.
	g = generate(t, s, prompt[:96], "", "", 1)
	if g.CachedTokens != 80 {
		t.Fatalf("exact-blocks prompt: cached_tokens = %d, want 80", g.CachedTokens)
	}
	// A different salt or adapter shares nothing.
	if g := generate(t, s, prompt, "", "tenant-b", 1); g.CachedTokens != 0 {
		t.Fatalf("salted: cached_tokens = %d, want 0", g.CachedTokens)
	}
}

func TestDecodeBlocksAreCachedToo(t *testing.T) {
	s := startServer(t, testConfig())
	prompt := seqTokens(1, 20)
	generate(t, s, prompt, "", "", 30)
	// 20 prompt + 30 generated = 50 tokens; the last generated token's KV is never
	// computed, so 49 tokens are in the cache: 3 full blocks.
	keys := s.KVBlockKeys()
	if len(keys) != 3 {
		t.Fatalf("cached blocks = %d, want 3 (%v)", len(keys), keys)
	}
	if !slices.Contains(keys, expectedKeys(DefaultModel, "", "", prompt[:16], 16)[0]) {
		t.Fatalf("first prompt block missing from %v", keys)
	}
}

func TestLoRAAndSaltKeys(t *testing.T) {
	cfg := testConfig()
	cfg.LoRAAdapters = []string{"sql-lora"}
	s := startServer(t, cfg)
	prompt := seqTokens(500, 40)
	generate(t, s, prompt, "sql-lora", "salt-1", 1)
	want := sortedUnique(expectedKeys(DefaultModel, "sql-lora", "salt-1", prompt, 16))
	if got := s.KVBlockKeys(); !slices.Equal(got, want) {
		t.Fatalf("KVBlockKeys = %v, want %v", got, want)
	}
}

func TestEvictionIsLRUOverFreeBlocks(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 8
	cfg.MaxModelLen = 128
	s := startServer(t, cfg)
	a, b, c := seqTokens(1000, 48), seqTokens(2000, 48), seqTokens(3000, 48)
	// Each request: 48 prompt tokens + 1 output → 4 blocks held while running, 3 cached after.
	generate(t, s, a, "", "", 1)
	generate(t, s, b, "", "", 1)
	// Touch a again: it becomes the most recently used; b is now the LRU.
	if g := generate(t, s, a, "", "", 1); g.CachedTokens != 32 {
		t.Fatalf("a again: cached = %d, want 32", g.CachedTokens)
	}
	generate(t, s, c, "", "", 1) // needs 4 blocks: evicts from b first
	keys := s.KVBlockKeys()
	ka := expectedKeys(DefaultModel, "", "", a, 16)
	kb := expectedKeys(DefaultModel, "", "", b, 16)
	kc := expectedKeys(DefaultModel, "", "", c, 16)
	for _, k := range append(ka, kc...) {
		if !slices.Contains(keys, k) {
			t.Fatalf("a or c block %x evicted; cache %x", k, keys)
		}
	}
	// b's tail is evicted before its head (a request's blocks are freed tail first).
	if slices.Contains(keys, kb[2]) {
		t.Fatalf("b's last block survived while b was the LRU; cache %x", keys)
	}
	if g := generate(t, s, a, "", "", 1); g.CachedTokens != 32 {
		t.Fatalf("a after c: cached = %d, want 32", g.CachedTokens)
	}
}

func TestTooLongIsRefused(t *testing.T) {
	cfg := testConfig()
	cfg.NumGPUBlocks = 4
	s := startServer(t, cfg)
	_, err := s.Generate(context.Background(), seqTokens(1, 60), "", "", 8)
	if err == nil || !errorsIs(err, ErrTooLong) {
		t.Fatalf("err = %v, want ErrTooLong", err)
	}
	// One that fits (60 + 4 = 64 tokens = 4 blocks) runs.
	generate(t, s, seqTokens(1, 60), "", "", 4)
}
