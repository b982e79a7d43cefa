package openai

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/tokenizer"
)

// goldenDoc returns a golden ~8k-token document of the tokenizer's test data (the
// same text the tokenizer's own benchmarks use).
func goldenDoc(tb testing.TB, name string) string {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "..", "tokenizer", "testdata", "golden", "qwen3.jsonl.gz"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var c struct{ Name, Text string }
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			tb.Fatal(err)
		}
		if c.Name == name {
			return c.Text
		}
	}
	tb.Fatalf("no golden document %q", name)
	return ""
}

// routingBodies builds n routing-case bodies as the router receives them: the known
// ~8.5k-token system prompt and a new ~200-token question that differs in each body.
// More bodies than the segment cache holds, so the question is never a cache hit.
func routingBodies(tb testing.TB, system string, first, n int) [][]byte {
	sys, err := json.Marshal(system)
	if err != nil {
		tb.Fatal(err)
	}
	head := []byte(`{"model":"Qwen/Qwen3-0.6B","stream":true,"max_tokens":256,"messages":[{"role":"system","content":`)
	bodies := make([][]byte, n)
	for k := range bodies {
		i := first + k
		q := fmt.Sprintf("Question %d: given the policy above, which instance should serve request %d, and why? ", i, i*7919)
		for len(q) < 900 {
			q += fmt.Sprintf("Consider the prefix cache, the queue depth %d and the fleet hit rate %d%%. ", i%17, i%100)
		}
		qj, _ := json.Marshal(q)
		b := make([]byte, 0, len(head)+len(sys)+len(qj)+64)
		b = append(b, head...)
		b = append(b, sys...)
		b = append(b, `},{"role":"user","content":`...)
		b = append(b, qj...)
		b = append(b, "}]}"...)
		bodies[k] = b
	}
	return bodies
}

// BenchmarkParseChat: ParseChat of the routing body (~37 KB, ~8.8k tokens).
func BenchmarkParseChat(b *testing.B) {
	body := routingBodies(b, goldenDoc(b, "doc-8k-b"), 1, 1)[0]
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseChat(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoutingFrontHalf: the router's front half for the routing case with warm
// caches — ParseChat(body) + Tokenize with the embedded Qwen3 tokenizer; the system
// prompt is known, the question is new on every call (bodies are built beforehand).
func BenchmarkRoutingFrontHalf(b *testing.B) {
	tok, err := tokenizer.Default()
	if err != nil {
		b.Fatal(err)
	}
	m, err := tok.WithConfig(tokenizer.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	sys := goldenDoc(b, "doc-8k-b")
	bodies := routingBodies(b, sys, 0, 2048)
	ctx := context.Background()
	warm, _ := ParseChat(routingBodies(b, sys, -1, 1)[0])
	if _, err := warm.Tokenize(ctx, m); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 1<<16)
	i := 0
	for b.Loop() {
		t0 := time.Now()
		r, err := ParseChat(bodies[i%len(bodies)])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Tokenize(ctx, m); err != nil {
			b.Fatal(err)
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
		}
		i++
	}
	// Per-request percentiles: on a shared machine the mean is dragged by other
	// tenants' bursts; the goal is a p50.
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*9/10].Nanoseconds()), "p90-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
