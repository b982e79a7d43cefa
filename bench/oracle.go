package bench

import (
	"github.com/kvroute/kvroute/kvblock"
)

// Prompt is one request's prompt as the engine sees it: the block-key seed (model,
// adapter, cache_salt) and the exact prompt token ids.
type Prompt struct {
	Seed uint64
	IDs  []uint32
}

// OracleResult is what an unbounded prefix cache would hit on a trace.
type OracleResult struct {
	// HitTokens and QueryTokens are summed over the trace, in tokens, like the engines'
	// vllm:prefix_cache_hits_total and vllm:prefix_cache_queries_total.
	HitTokens, QueryTokens int64
	// PerRequest holds each request's oracle hit tokens, in trace order.
	PerRequest []int
}

// HitRate is HitTokens/QueryTokens, 0 for an empty trace.
func (o OracleResult) HitRate() float64 {
	if o.QueryTokens == 0 {
		return 0
	}
	return float64(o.HitTokens) / float64(o.QueryTokens)
}

// Oracle computes the hit rate of an unbounded, never-evicting prefix cache shared by the
// whole fleet on prompts in arrival order: a request hits the full blocks of its prompt
// whose whole prefix was in an earlier prompt, counted block-granular in tokens. Like
// vLLM, at least the last prompt token is always computed, so a prompt of n tokens hits
// at most ⌊(n−1)/blockSize⌋ blocks. Only prompt blocks are cached: generated tokens are
// not, since the workloads resend recorded answers, not the engine's.
func Oracle(prompts []Prompt, blockSize int) OracleResult {
	if blockSize < 1 {
		blockSize = kvblock.DefaultBlockSize
	}
	seen := make(map[uint64]struct{})
	res := OracleResult{PerRequest: make([]int, len(prompts))}
	var keys []uint64
	for i, p := range prompts {
		keys = kvblock.Keys(keys[:0], p.Seed, p.IDs, blockSize)
		maxHit := 0
		if len(p.IDs) > 0 {
			maxHit = (len(p.IDs) - 1) / blockSize
		}
		hit := 0
		for hit < len(keys) && hit < maxHit {
			if _, ok := seen[keys[hit]]; !ok {
				break
			}
			hit++
		}
		for _, k := range keys {
			seen[k] = struct{}{}
		}
		res.PerRequest[i] = hit * blockSize
		res.HitTokens += int64(hit * blockSize)
		res.QueryTokens += int64(len(p.IDs))
	}
	return res
}
