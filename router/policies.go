package router

import (
	"math/rand/v2"
	"time"
)

// Decision says why an instance was chosen.
type Decision uint8

// Decisions, in the order of the kv-aware chain.
const (
	DecisionNone Decision = iota
	DecisionCacheHit
	DecisionAffinity
	DecisionOverflow
	DecisionRandom
	DecisionLeastRequest
	numDecisions
)

var decisionNames = [numDecisions]string{"none", "cache_hit", "affinity", "overflow", "random", "least_request"}

func (d Decision) String() string {
	if d < numDecisions {
		return decisionNames[d]
	}
	return "unknown"
}

// Candidate is one instance as a policy sees it for one request. The framework fills
// every field before the policies run; policies only read them.
type Candidate struct {
	ID string
	// InFlight is the fleet-wide count of requests in flight on the instance (this replica
	// plus the others' published counts).
	InFlight int
	// Waiting is the engine's own queue length from its last load report.
	Waiting int
	// CachedTokens is the predicted prefix-cache hit for this request, in tokens (index
	// plus pending overlay, capped like the engine caps it).
	CachedTokens int
	// PredictedTTFT = queue estimate + uncached tokens / the instance's prefill rate.
	PredictedTTFT time.Duration
	// Score is the instance's rendezvous-hash weight for the request's affinity key.
	Score uint64

	inst *instance
}

// RouteInfo is the request as the policies see it.
type RouteInfo struct {
	Model        string
	Group        string
	PromptTokens int
}

// Policy picks one candidate. It returns the candidate's position in pool and why, or
// (-1, DecisionNone) when it has nothing to offer (pool is never empty when called, but a
// policy with a fallback may decline). Policies must not modify pool.
type Policy interface {
	Select(info *RouteInfo, pool []Candidate) (int, Decision)
}

// CacheHit picks, among candidates below the threshold whose cached prefix is at least
// MinMatchTokens, the one with the lowest predicted TTFT (ties: more cached tokens, then
// the higher affinity score). Without such a candidate it defers to Fallback.
type CacheHit struct {
	Threshold      int
	MinMatchTokens int
	Fallback       Policy
}

func (p *CacheHit) Select(info *RouteInfo, pool []Candidate) (int, Decision) {
	best := -1
	for i := range pool {
		c := &pool[i]
		if c.CachedTokens <= 0 || c.CachedTokens < p.MinMatchTokens || c.InFlight >= p.Threshold {
			continue
		}
		if best < 0 || betterHit(c, &pool[best]) {
			best = i
		}
	}
	if best >= 0 {
		return best, DecisionCacheHit
	}
	return fallback(p.Fallback, info, pool)
}

func betterHit(a, b *Candidate) bool {
	if a.PredictedTTFT != b.PredictedTTFT {
		return a.PredictedTTFT < b.PredictedTTFT
	}
	if a.CachedTokens != b.CachedTokens {
		return a.CachedTokens > b.CachedTokens
	}
	return a.Score > b.Score
}

// HashAffinity ranks candidates by rendezvous hash (Candidate.Score, from the routing
// group, the model and the prompt's first PrefixLength characters) and picks the
// highest-ranked one below Threshold among the first Depth ranks (0 = all). The
// top-ranked instance is an affinity decision; a lower rank means the preferred instance
// was full, which is reported as overflow. Otherwise it defers to Fallback.
type HashAffinity struct {
	Threshold int
	Depth     int
	Fallback  Policy
}

func (p *HashAffinity) Select(info *RouteInfo, pool []Candidate) (int, Decision) {
	depth := p.Depth
	if depth <= 0 || depth > len(pool) {
		depth = len(pool)
	}
	// Walk the ranks without sorting: each round finds the best score below the last.
	var ceiling uint64
	first := true
	for rank := 0; rank < depth; rank++ {
		best := -1
		for i := range pool {
			s := pool[i].Score
			if !first && s >= ceiling {
				continue
			}
			if best < 0 || s > pool[best].Score {
				best = i
			}
		}
		if best < 0 {
			break
		}
		if pool[best].InFlight < p.Threshold {
			if rank == 0 {
				return best, DecisionAffinity
			}
			return best, DecisionOverflow
		}
		ceiling, first = pool[best].Score, false
	}
	return fallback(p.Fallback, info, pool)
}

// Overflow picks the least-loaded candidate: fewest in-flight requests, then the
// shortest engine queue, then the highest affinity score. It always picks.
type Overflow struct{}

func (Overflow) Select(_ *RouteInfo, pool []Candidate) (int, Decision) {
	if len(pool) == 0 {
		return -1, DecisionNone
	}
	return leastLoaded(pool), DecisionOverflow
}

// LeastRequest is Overflow's choice reported as its own strategy, for comparisons.
type LeastRequest struct{}

func (LeastRequest) Select(_ *RouteInfo, pool []Candidate) (int, Decision) {
	if len(pool) == 0 {
		return -1, DecisionNone
	}
	return leastLoaded(pool), DecisionLeastRequest
}

func leastLoaded(pool []Candidate) int {
	best := 0
	for i := 1; i < len(pool); i++ {
		a, b := &pool[i], &pool[best]
		if a.InFlight != b.InFlight {
			if a.InFlight < b.InFlight {
				best = i
			}
			continue
		}
		if a.Waiting != b.Waiting {
			if a.Waiting < b.Waiting {
				best = i
			}
			continue
		}
		if a.Score > b.Score {
			best = i
		}
	}
	return best
}

// Random picks uniformly.
type Random struct{}

func (Random) Select(_ *RouteInfo, pool []Candidate) (int, Decision) {
	if len(pool) == 0 {
		return -1, DecisionNone
	}
	return rand.IntN(len(pool)), DecisionRandom
}

func fallback(p Policy, info *RouteInfo, pool []Candidate) (int, Decision) {
	if p == nil {
		return -1, DecisionNone
	}
	return p.Select(info, pool)
}

// newPolicy builds the chain Config.Policy names.
func newPolicy(cfg *Config) Policy {
	switch cfg.Policy {
	case PolicyRandom:
		return Random{}
	case PolicyLeastRequest:
		return LeastRequest{}
	case PolicyPrefixHash:
		// SageMaker PREFIX_AWARE: the hashed instance unless it reached the threshold, then
		// the least loaded.
		return &HashAffinity{Threshold: cfg.ConcurrencyThreshold, Depth: 1, Fallback: Overflow{}}
	default:
		return &CacheHit{
			Threshold:      cfg.ConcurrencyThreshold,
			MinMatchTokens: cfg.MinMatchTokens,
			Fallback:       &HashAffinity{Threshold: cfg.ConcurrencyThreshold, Fallback: Overflow{}},
		}
	}
}

// Interface guards.
var (
	_ Policy = (*CacheHit)(nil)
	_ Policy = (*HashAffinity)(nil)
	_ Policy = Overflow{}
	_ Policy = LeastRequest{}
	_ Policy = Random{}
)
