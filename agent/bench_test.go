package agent

import (
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// BenchmarkPipeline measures decode + translate + publish (to a real in-process NATS
// server) per block event, on one goroutine: engine batches of `blocks` stored blocks
// (16 tokens each) chained from the previous batch, folded 64 engine batches per
// published EventBatch, with the removals of the blocks stored 1000 batches earlier.
func BenchmarkPipeline(b *testing.B) {
	for _, blocks := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) { benchPipeline(b, blocks) })
	}
}

func benchPipeline(b *testing.B, blocks int) {
	_, nc := startNATS(b)
	cfg := DefaultConfig()
	cfg.EngineURL, cfg.ZMQEndpoint = "http://127.0.0.1:1", "tcp://127.0.0.1:1"
	a, err := New(cfg, nc, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	a.mir = newMirror("m", 16)
	a.epoch = nextEpoch()
	// Pre-encode a ring of payloads: batch i stores blocks chained from batch i-1's last
	// block and removes batch (i-ring/2)'s blocks, so the mirror stays bounded.
	const ring = 2048
	payloads := make([][]byte, ring)
	hash := func(i, j int) uint64 { return uint64(i)<<20 | uint64(j) + 1 }
	for i := range ring {
		hashes := make([]any, blocks)
		tokens := make([]any, 0, blocks*16)
		for j := range blocks {
			hashes[j] = hash(i, j)
			for k := range 16 {
				tokens = append(tokens, uint32(i*131+j*17+k))
			}
		}
		var parent any
		if i > 0 {
			parent = hash(i-1, blocks-1)
		}
		events := []any{[]any{"BlockStored", hashes, parent, tokens, 16, nil, "GPU", nil, nil}}
		if i >= ring/2 {
			rm := make([]any, blocks)
			for j := range blocks {
				rm[j] = hash(i-ring/2, j)
			}
			events = append(events, []any{"BlockRemoved", rm, "GPU"})
		}
		payloads[i], _ = msgpack.Marshal([]any{1.7e9, events, 0})
	}
	b.ReportAllocs()
	b.ResetTimer()
	seq := uint64(0)
	for i := 0; i < b.N; i++ {
		idx := i % ring
		if idx == 0 {
			a.mu.Lock()
			a.mir.reset()
			a.mu.Unlock()
			a.haveSeq = false
		}
		seq++
		frames := [][]byte{[]byte("kv"), be64(seq), payloads[idx]}
		a.onLive(b.Context(), frames)
		if i%64 == 63 {
			a.flush()
		}
	}
	a.flush()
	b.StopTimer()
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*blocks)/b.Elapsed().Seconds(), "blocks/s")
}

func be64(v uint64) []byte {
	return []byte{byte(v >> 56), byte(v >> 48), byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

// BenchmarkDecode measures the decoder alone on the captured llm-d and vLLM vectors.
func BenchmarkDecode(b *testing.B) {
	payload := loadVectors(b)["V1"]
	d := NewDecoder()
	var batch Batch
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if err := d.Decode(payload, &batch); err != nil {
			b.Fatal(err)
		}
	}
}
