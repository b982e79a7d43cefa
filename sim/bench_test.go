package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// benchPrompts builds n prompts of promptLen tokens sharing a prefix of shared tokens
// (a system prompt), like a chat workload.
func benchPrompts(n, promptLen, shared int) [][]uint32 {
	prefix := seqTokens(1, shared)
	out := make([][]uint32, n)
	for i := range out {
		p := make([]uint32, 0, promptLen)
		p = append(p, prefix...)
		p = append(p, seqTokens(100000+i*promptLen, promptLen-shared)...)
		out[i] = p
	}
	return out
}

func benchServer(b *testing.B) *Server {
	cfg := DefaultConfig()
	cfg.TimeScale = 0
	cfg.HashSeed = "0"
	cfg.KVEventsEnabled = true
	cfg.NumGPUBlocks = 4096
	cfg.MaxNumSeqs = 256
	cfg.MaxNumBatchedTokens = 8192
	s, err := New(cfg, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkBookkeeping is the simulator's own cost per request at time scale 0: a
// 512-token prompt (256 shared), 16 output tokens, events published, many requests in
// flight. Run with -cpu 1 for the one-core figure.
func BenchmarkBookkeeping(b *testing.B) {
	for _, out := range []int{1, 16} {
		b.Run(fmt.Sprintf("prompt512_out%d", out), func(b *testing.B) {
			s := benchServer(b)
			prompts := benchPrompts(1024, 512, 256)
			var next atomic.Int64
			b.SetParallelism(64)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p := prompts[next.Add(1)%int64(len(prompts))]
					if _, err := s.Generate(context.Background(), p, "", "", out); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// BenchmarkHTTPBookkeeping is the same through the HTTP API (token-id prompts, client
// and server in one process).
func BenchmarkHTTPBookkeeping(b *testing.B) {
	for _, promptLen := range []int{64, 512} {
		b.Run(fmt.Sprintf("prompt%d_out16", promptLen), func(b *testing.B) {
			s := benchServer(b)
			prompts := benchPrompts(256, promptLen, promptLen/2)
			bodies := make([]string, len(prompts))
			for i, p := range prompts {
				bodies[i] = `{"model":"Qwen/Qwen3-0.6B","prompt":` + idsJSON(p) + `,"max_tokens":16}`
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
			var next atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(s.URL()+"/v1/completions", "application/json", strings.NewReader(bodies[next.Add(1)%int64(len(bodies))]))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

func BenchmarkBlockHash(b *testing.B) {
	for _, bs := range []int{16, 32, 128} {
		b.Run(fmt.Sprintf("block%d", bs), func(b *testing.B) {
			var h hasher
			toks := seqTokens(100000, bs)
			parent, _ := noneHash("0")
			extra := []string{"salt"}
			b.ReportAllocs()
			for b.Loop() {
				parent = h.block(&parent, toks, extra)
			}
		})
	}
}

func BenchmarkEncodeBatch(b *testing.B) {
	for _, blocks := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("blocks%d", blocks), func(b *testing.B) {
			var ev eventBuf
			toks := seqTokens(100000, 16*blocks)
			var dst []byte
			b.ReportAllocs()
			for b.Loop() {
				ev.reset()
				ev.stored(12345678901234567890, true, "", "")
				for i := range blocks {
					ev.storedBlock(uint64(i)*0x9e3779b97f4a7c15, toks[i*16:(i+1)*16])
				}
				ev.removed(42)
				dst = encodeBatch(dst[:0], 1.7e9, &ev, false, 16, 0)
			}
		})
	}
}
