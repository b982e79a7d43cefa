package kvblock

import (
	"fmt"
	"testing"
)

func BenchmarkKeys(b *testing.B) {
	for _, n := range []int{512, 2048, 8192, 32768} {
		b.Run(fmt.Sprintf("tokens=%d/block=16", n), func(b *testing.B) {
			tokens := make([]uint32, n)
			for i := range tokens {
				tokens[i] = uint32(i*7919) % 151_000
			}
			dst := make([]uint64, 0, n/16)
			seed := Seed("Qwen/Qwen3-8B", "", "")
			b.SetBytes(int64(n * 4))
			b.ReportAllocs()
			for b.Loop() {
				dst = Keys(dst[:0], seed, tokens, 16)
			}
		})
	}
}

func BenchmarkSeed(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Seed("meta-llama/Llama-3.1-70B-Instruct", "sql-lora", "tenant-42")
	}
}
