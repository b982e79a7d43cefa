package tokenizer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// benchDoc returns the golden 8k-token document (the same text the JS timing uses).
func benchDoc(b *testing.B, name string) string {
	b.Helper()
	for _, c := range readGoldenTB(b, "qwen3") {
		if c.Name == name {
			return c.Text
		}
	}
	b.Fatalf("no golden case %q", name)
	return ""
}

// BenchmarkEncodeCold: an 8k-token document with every cache disabled (tokens/s).
func BenchmarkEncodeCold(b *testing.B) {
	cfg := DefaultConfig()
	cfg.SegmentCacheEntries, cfg.WordCacheEntries = 0, 0
	m, err := mustDefault(b).WithConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	doc := benchDoc(b, "doc-8k-a")
	ids, _ := m.Encode(doc, false)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	b.ResetTimer()
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := m.Encode(doc, false); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	// The median call: robust against other tenants' bursts on a shared machine.
	slices.Sort(lat)
	b.ReportMetric(float64(len(ids))/lat[len(lat)/2].Seconds(), "p50-tokens/s")
}

// BenchmarkEncodeWordCache: the same document with only the word cache (warm).
func BenchmarkEncodeWordCache(b *testing.B) {
	cfg := DefaultConfig()
	cfg.SegmentCacheEntries = 0
	m, _ := mustDefault(b).WithConfig(cfg)
	doc := benchDoc(b, "doc-8k-a")
	ids, _ := m.Encode(doc, false)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Encode(doc, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// routingRequest is the routing case: a known ~8k-token system prompt and a new
// ~200-token question, different on every call.
func routingRequest(system string, i int) *ChatRequest {
	q := fmt.Sprintf("Question %d: given the policy above, which instance should serve request %d, and why? ", i, i*7919)
	for len(q) < 900 {
		q += fmt.Sprintf("Consider the prefix cache, the queue depth %d and the fleet hit rate %d%%. ", i%17, i%100)
	}
	return &ChatRequest{
		Messages:            []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": q}},
		AddGenerationPrompt: true,
	}
}

// BenchmarkRoutingChat: render + tokenize with warm caches (the system prompt is
// known, the question is new each time).
func BenchmarkRoutingChat(b *testing.B) {
	m, _ := mustDefault(b).WithConfig(DefaultConfig())
	sys := benchDoc(b, "doc-8k-b")
	ctx := context.Background()
	if _, err := m.Chat(ctx, "", routingRequest(sys, -1)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := m.Chat(ctx, "", routingRequest(sys, i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSReference times @huggingface/tokenizers on the same document in the
// same run (needs node and testdata/gen/node_modules; skipped otherwise).
func BenchmarkJSReference(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node not installed")
	}
	if _, err := os.Stat(filepath.Join("testdata", "gen", "node_modules", "@huggingface", "tokenizers")); err != nil {
		b.Skip("run `make testdata` (npm install in tokenizer/testdata/gen) first")
	}
	doc := benchDoc(b, "doc-8k-a")
	docFile := filepath.Join(b.TempDir(), "doc.txt")
	os.WriteFile(docFile, []byte(doc), 0o644)
	for b.Loop() {
		out, err := exec.Command(node, filepath.Join("testdata", "gen", "bench.mjs"), docFile).CombinedOutput()
		if err != nil {
			b.Fatalf("bench.mjs: %v\n%s", err, out)
		}
		var coldNs, warmNs, tokens float64
		if _, err := fmt.Sscanf(string(out), "cold_ns=%g warm_ns=%g tokens=%g", &coldNs, &warmNs, &tokens); err != nil {
			b.Fatalf("bench.mjs output %q: %v", out, err)
		}
		b.ReportMetric(tokens/(coldNs/float64(time.Second)), "js-cold-tokens/s")
		b.ReportMetric(tokens/(warmNs/float64(time.Second)), "js-warm-tokens/s")
	}
}
