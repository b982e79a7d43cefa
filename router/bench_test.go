package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/tokenizer"
)

// blockIndex adapts the real indexer.BlockIndex (the structure inside indexer.Service)
// for benchmarks that need no NATS.
type blockIndex struct {
	idx   *indexer.BlockIndex
	infos []instanceInfo
}

func (b *blockIndex) lookup(keys []uint64, dst []indexMatch) []indexMatch {
	return b.idx.Lookup(keys, dst)
}
func (b *blockIndex) instances() []instanceInfo { return b.infos }

// benchRouter is a kv-aware router over a real BlockIndex with n instances; the first
// holds the keys of prefixIDs.
func benchRouter(b *testing.B, n int, tok tokenizer.Tokenizer, holderIDs []uint32) *Router {
	bi, err := indexer.NewBlockIndex(indexer.BlockIndexConfig{})
	if err != nil {
		b.Fatal(err)
	}
	src := &blockIndex{idx: bi}
	for i := range n {
		src.infos = append(src.infos, instanceInfo{id: fmt.Sprintf("engine-%d", i), engineURL: fmt.Sprintf("http://127.0.0.1:%d", 20000+i),
			model: tokenizer.DefaultModelName, blockSize: 16, routable: true})
	}
	keys := kvblock.Keys(nil, kvblock.Seed(tokenizer.DefaultModelName, "", ""), holderIDs, 16)
	if err := bi.Store("engine-0", keys); err != nil {
		b.Fatal(err)
	}
	r, err := New(DefaultConfig(), Deps{Tokenizer: tok, Registry: prometheus.NewRegistry(), index: src})
	if err != nil {
		b.Fatal(err)
	}
	r.refresh()
	return r
}

// BenchmarkRoutingDecision8k: parse + tokenize (warm segment cache) + keys + one index
// lookup + the policy chain, for a chat whose ~8k-token system prompt is cached on one of
// 7 instances and whose question is new. Reports p50 and p99 per decision.
func BenchmarkRoutingDecision8k(b *testing.B) {
	tok := defaultTok(b)
	system := longText(8, 5050)
	warm := chatBody(system, "warm-up question", "")
	req, err := openai.ParseChat([]byte(warm))
	if err != nil {
		b.Fatal(err)
	}
	res, err := req.Tokenize(context.Background(), tok)
	if err != nil {
		b.Fatal(err)
	}
	r := benchRouter(b, 7, tok, res.IDs)
	b.Logf("prompt tokens: %d", len(res.IDs))
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = []byte(chatBody(system, fmt.Sprintf("question %d: what does section %d say?", i, i*3), ""))
	}
	hdr := http.Header{}
	durs := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		start := time.Now()
		req, err := openai.ParseChat(bodies[i%len(bodies)])
		if err != nil {
			b.Fatal(err)
		}
		d, err := r.routeOpenAI(context.Background(), hdr, req, start)
		if err != nil {
			b.Fatal(err)
		}
		if d.why != DecisionCacheHit || d.inst().id != "engine-0" {
			b.Fatalf("decision %s on %s", d.why, d.inst().id)
		}
		r.release(d.st)
		if len(durs) < cap(durs) {
			durs = append(durs, time.Since(start))
		}
		i++
	}
	reportQuantiles(b, durs, "decision")
}

func reportQuantiles(b *testing.B, durs []time.Duration, name string) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	q := func(p float64) float64 { return float64(durs[int(p*float64(len(durs)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.5), name+"-p50-µs")
	b.ReportMetric(q(0.99), name+"-p99-µs")
}

// BenchmarkProxyAddedLatency500RPS sends the same non-streaming chat at 500 requests/s
// (open loop) for 6 s directly to an engine stand-in and then through the router
// (kv-aware, real tokenizer and keys), and reports p50/p99 of each and the differences.
// Run with -benchtime=1x: one measurement per run.
func BenchmarkProxyAddedLatency500RPS(b *testing.B) {
	const rate, seconds = 500, 6
	tok := defaultTok(b)
	resp := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}}`)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	}))
	defer engine.Close()
	idx := newMemIndex()
	idx.setInstance(instanceInfo{id: "e", engineURL: engine.URL, model: tokenizer.DefaultModelName, blockSize: 16, routable: true})
	cfg := DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	r, err := New(cfg, Deps{Tokenizer: tok, Registry: prometheus.NewRegistry(), index: idx})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	body := chatBody(longText(11, 1500), "how long is this?", `,"max_tokens":1`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxIdleConns: 512}}
	measure := func(url string) []time.Duration {
		n := rate * seconds
		out := make([]time.Duration, n)
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for i := range n {
			<-tick.C
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				out[i] = time.Since(start)
			}()
		}
		wg.Wait()
		slices.Sort(out)
		return out
	}
	for b.Loop() {
		_ = measure(engine.URL) // warm the client pool
		direct := measure(engine.URL)
		proxied := measure(r.URL())
		q := func(d []time.Duration, p float64) float64 {
			return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) / 1e6
		}
		b.ReportMetric(q(direct, 0.5), "direct-p50-ms")
		b.ReportMetric(q(direct, 0.99), "direct-p99-ms")
		b.ReportMetric(q(proxied, 0.5), "proxied-p50-ms")
		b.ReportMetric(q(proxied, 0.99), "proxied-p99-ms")
		b.ReportMetric(q(proxied, 0.5)-q(direct, 0.5), "added-p50-ms")
		b.ReportMetric(q(proxied, 0.99)-q(direct, 0.99), "added-p99-ms")
	}
}
