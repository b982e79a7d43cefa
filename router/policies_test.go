package router

import (
	"testing"
	"time"
)

func pool(cs ...Candidate) []Candidate { return cs }

func TestCacheHitPicksLowestPredictedTTFT(t *testing.T) {
	p := &CacheHit{Threshold: 4, MinMatchTokens: 32, Fallback: Overflow{}}
	cs := pool(
		Candidate{ID: "a", CachedTokens: 1024, PredictedTTFT: 90 * time.Millisecond},
		Candidate{ID: "b", CachedTokens: 1024, PredictedTTFT: 40 * time.Millisecond},
		Candidate{ID: "c", CachedTokens: 16, PredictedTTFT: time.Millisecond},                // below MinMatchTokens
		Candidate{ID: "d", CachedTokens: 2048, PredictedTTFT: time.Millisecond, InFlight: 4}, // at threshold
	)
	if i, d := p.Select(&RouteInfo{}, cs); cs[i].ID != "b" || d != DecisionCacheHit {
		t.Fatalf("got %s %s, want b cache_hit", cs[i].ID, d)
	}
	// No useful hit: falls back.
	cs = pool(Candidate{ID: "a", InFlight: 3}, Candidate{ID: "b", InFlight: 1})
	if i, d := p.Select(&RouteInfo{}, cs); cs[i].ID != "b" || d != DecisionOverflow {
		t.Fatalf("fallback: got %s %s", cs[i].ID, d)
	}
	// Ties go to more cached tokens, then the affinity score.
	cs = pool(
		Candidate{ID: "a", CachedTokens: 64, PredictedTTFT: time.Millisecond, Score: 9},
		Candidate{ID: "b", CachedTokens: 128, PredictedTTFT: time.Millisecond, Score: 1},
	)
	if i, _ := p.Select(&RouteInfo{}, cs); cs[i].ID != "b" {
		t.Fatalf("tie: got %s", cs[i].ID)
	}
}

func TestHashAffinityRanksAndOverflows(t *testing.T) {
	cs := pool(
		Candidate{ID: "a", Score: 10, InFlight: 2},
		Candidate{ID: "b", Score: 30, InFlight: 2},
		Candidate{ID: "c", Score: 20, InFlight: 0},
	)
	full := &HashAffinity{Threshold: 2, Fallback: Overflow{}}
	if i, d := full.Select(&RouteInfo{}, cs); cs[i].ID != "c" || d != DecisionOverflow {
		t.Fatalf("ranked: got %s %s, want c overflow (b full)", cs[i].ID, d)
	}
	cs[1].InFlight = 1
	if i, d := full.Select(&RouteInfo{}, cs); cs[i].ID != "b" || d != DecisionAffinity {
		t.Fatalf("preferred free: got %s %s", cs[i].ID, d)
	}
	// SageMaker shape: only the preferred instance, then least loaded.
	cs[1].InFlight = 2
	sm := &HashAffinity{Threshold: 2, Depth: 1, Fallback: Overflow{}}
	if i, d := sm.Select(&RouteInfo{}, cs); cs[i].ID != "c" || d != DecisionOverflow {
		t.Fatalf("prefix-hash: got %s %s", cs[i].ID, d)
	}
	// All full, no fallback: declines.
	for i := range cs {
		cs[i].InFlight = 5
	}
	if i, d := (&HashAffinity{Threshold: 2}).Select(&RouteInfo{}, cs); i != -1 || d != DecisionNone {
		t.Fatalf("all full: %d %s", i, d)
	}
}

func TestLeastLoadedOrder(t *testing.T) {
	cs := pool(
		Candidate{ID: "a", InFlight: 2, Waiting: 0},
		Candidate{ID: "b", InFlight: 1, Waiting: 5},
		Candidate{ID: "c", InFlight: 1, Waiting: 2, Score: 1},
		Candidate{ID: "d", InFlight: 1, Waiting: 2, Score: 7},
	)
	if i, d := (LeastRequest{}).Select(nil, cs); cs[i].ID != "d" || d != DecisionLeastRequest {
		t.Fatalf("got %s %s", cs[i].ID, d)
	}
	seen := map[int]bool{}
	for range 200 {
		i, d := (Random{}).Select(nil, cs)
		if d != DecisionRandom {
			t.Fatal(d)
		}
		seen[i] = true
	}
	if len(seen) != 4 {
		t.Fatalf("random picked only %v", seen)
	}
}

// Rendezvous scores move only the keys of a removed instance.
func TestRendezvousStability(t *testing.T) {
	ids := []uint64{11, 22, 33, 44, 55}
	best := func(h uint64, ids []uint64) uint64 {
		var b, bs uint64
		for _, id := range ids {
			if s := score(h, id); s >= bs {
				b, bs = id, s
			}
		}
		return b
	}
	moved, counts := 0, map[uint64]int{}
	for h := uint64(0); h < 5000; h++ {
		before := best(h*0x9e3779b97f4a7c15, ids)
		counts[before]++
		after := best(h*0x9e3779b97f4a7c15, ids[:4]) // drop 55
		if before != 55 && before != after {
			moved++
		}
	}
	if moved != 0 {
		t.Fatalf("%d keys moved that were not on the removed instance", moved)
	}
	for id, n := range counts {
		if n < 800 || n > 1200 {
			t.Fatalf("instance %d got %d of 5000 keys: unbalanced", id, n)
		}
	}
}
