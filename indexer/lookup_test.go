package indexer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkLookup compares BlockIndex.Lookup with the pre-batching walk (same order expected)
// and with the naive reference (as sets, best first).
func checkLookup(t *testing.T, x *BlockIndex, ref *refIndex, keys []uint64, what string) {
	t.Helper()
	got := x.Lookup(keys, nil)
	if old := x.lookupV0(keys, nil); !slices.Equal(got, old) {
		t.Fatalf("%s: Lookup = %v, pre-batching walk = %v", what, got, old)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Blocks > got[i-1].Blocks {
			t.Fatalf("%s: Lookup not best first: %v", what, got)
		}
	}
	if ref != nil {
		sortMatches(got)
		if want := ref.Lookup(keys, nil); !slices.Equal(got, want) {
			t.Fatalf("%s: Lookup = %v, reference %v", what, got, want)
		}
	}
}

// TestLookupEveryExitPosition ends a 200-key chain's run at every position, across the
// batch boundaries of the walk (4, 12, 28, 60, 92, ...): by a key nobody holds (the walk
// stops on a missing key) and by a key only some hold (the last candidate drops out).
func TestLookupEveryExitPosition(t *testing.T) {
	const n = 200
	rng := rand.New(rand.NewPCG(3, 4))
	chain := randKeys(rng, n)
	x, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	ref := newRefIndex(0)
	store := func(inst string, keys []uint64) {
		must(t, x.Store(inst, keys))
		must(t, ref.Store(inst, keys))
	}
	remove := func(inst string, keys []uint64) {
		x.Remove(inst, keys)
		ref.Remove(inst, keys)
	}
	store("a", chain)
	for p := range n {
		// Missing key: a holds everything but chain[p].
		remove("a", chain[p:p+1])
		checkLookup(t, x, ref, chain, fmt.Sprintf("missing key at %d", p))
		if got := x.Lookup(chain, nil); p > 0 && (len(got) != 1 || got[0].Blocks != p) {
			t.Fatalf("missing key at %d: Lookup = %v, want a with %d blocks", p, got, p)
		}
		// Dropped candidate: b holds the whole chain, so the walk goes on past a.
		store("b", chain)
		checkLookup(t, x, ref, chain, fmt.Sprintf("a drops out at %d", p))
		remove("b", chain)
		// Dropped last candidate: b holds the key at p (not the first), a does not.
		store("b", chain[p:])
		checkLookup(t, x, ref, chain, fmt.Sprintf("a drops out at %d, no candidate left", p))
		remove("b", chain)
		// Chains shorter than the run, ending inside and at the edges of batches.
		checkLookup(t, x, ref, chain[:p+1], fmt.Sprintf("chain of %d keys", p+1))
		store("a", chain[p:p+1])
	}
	// Both drop out at different depths in the same batch and in different batches.
	for _, d := range [][2]int{{5, 6}, {11, 12}, {12, 13}, {27, 61}, {59, 60}, {100, 199}} {
		store("c", chain[:d[0]])
		store("d", chain[:d[1]])
		checkLookup(t, x, ref, chain, fmt.Sprintf("c at %d, d at %d", d[0], d[1]))
		remove("c", chain)
		remove("d", chain)
	}
}

// hashInverse returns the multiplicative inverse of hashMul mod 2^64, so tests can make
// keys with chosen hashes.
func hashInverse() uint64 {
	inv := uint64(hashMul)
	for range 6 {
		inv *= 2 - hashMul*inv
	}
	return inv
}

// TestLookupCrowdedProbes makes chains whose keys share their home slot or even their
// whole 32-bit fingerprint, so that the walk's candidate slot is often wrong: keys
// displaced far from home, fingerprint collisions, and absent keys inside a cluster.
func TestLookupCrowdedProbes(t *testing.T) {
	x, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	if inv := hashInverse(); inv*hashMul != 1 {
		t.Fatalf("bad inverse %x", inv)
	}
	inv := hashInverse()
	keyWithHash := func(h uint64) uint64 { return (h * inv) ^ x.seed }
	ref := newRefIndex(0)
	rng := rand.New(rand.NewPCG(5, 6))
	var chains [][]uint64
	for c := range 12 {
		chain := make([]uint64, 48)
		top := rng.Uint64()
		for i := range chain {
			switch c % 3 {
			case 0: // the same fingerprint (and home) for every key
				chain[i] = keyWithHash(top&^0xFFFFFFFF | uint64(i+1))
			case 1: // the same home, different fingerprints
				chain[i] = keyWithHash(top&^(1<<48-1) | rng.Uint64()&(1<<48-1))
			default: // neighbouring homes
				chain[i] = keyWithHash(top + uint64(i%4)<<50 + rng.Uint64()&(1<<32-1))
			}
		}
		if h := x.hash(chain[0]); h&^0xFFFFFFFF != x.hash(chain[1])&^0xFFFFFFFF && c%3 == 0 {
			t.Fatalf("crafted keys do not share a fingerprint")
		}
		chains = append(chains, chain)
		for j := range 3 {
			inst := fmt.Sprintf("i%d", (c+j)%5)
			keys := chain[:10+rng.IntN(len(chain)-10)]
			must(t, x.Store(inst, keys))
			must(t, ref.Store(inst, keys))
		}
	}
	for c, chain := range chains {
		checkLookup(t, x, ref, chain, fmt.Sprintf("chain %d", c))
		// Remove a key in the middle of a cluster: it is absent, its neighbours stay.
		for _, in := range []string{"i0", "i1", "i2", "i3", "i4"} {
			x.Remove(in, chain[20:21])
			ref.Remove(in, chain[20:21])
		}
		checkLookup(t, x, ref, chain, fmt.Sprintf("chain %d without key 20", c))
	}
	if st := x.Stats(); st.Keys == 0 {
		t.Fatal("nothing stored")
	}
}

// TestLookupCandidateLists covers the candidate list on Lookup's stack (up to
// lookupOwnHolders holders of the first key) and the pooled one beyond, with dead
// holders left out of both.
func TestLookupCandidateLists(t *testing.T) {
	chain := randKeys(rand.New(rand.NewPCG(8, 9)), 70)
	for _, holders := range []int{1, 4, 5, lookupOwnHolders, lookupOwnHolders + 1, 100} {
		x, err := NewBlockIndex(BlockIndexConfig{})
		must(t, err)
		ref := newRefIndex(0)
		for i := range holders {
			inst := fmt.Sprintf("h%03d", i)
			keys := chain[:1+i%len(chain)]
			must(t, x.Store(inst, keys))
			must(t, ref.Store(inst, keys))
		}
		checkLookup(t, x, ref, chain, fmt.Sprintf("%d holders", holders))
		for i := 0; i < holders; i += 2 {
			x.RemoveInstance(fmt.Sprintf("h%03d", i))
			ref.RemoveInstance(fmt.Sprintf("h%03d", i))
		}
		checkLookup(t, x, ref, chain, fmt.Sprintf("%d holders, half removed", holders))
		if got := x.Lookup(chain, nil); len(got) != holders/2 {
			t.Fatalf("%d holders, half removed: %d matches", holders, len(got))
		}
	}
}

// TestLookupMatchesPreBatching compares the two walks over a fleet-shaped index, with
// chains cut at random depths and chains with foreign keys spliced in.
func TestLookupMatchesPreBatching(t *testing.T) {
	x, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	chains := fleetWorkload(t, x, 16, 60_000, 3)
	rng := rand.New(rand.NewPCG(10, 11))
	for c, chain := range chains {
		checkLookup(t, x, nil, chain, fmt.Sprintf("chain %d", c))
		q := slices.Clone(chain[:1+rng.IntN(len(chain))])
		q[rng.IntN(len(q))] = rng.Uint64()
		checkLookup(t, x, nil, q, fmt.Sprintf("chain %d with a foreign key", c))
	}
	x.RemoveInstance("engine-003")
	for c, chain := range chains[:200] {
		checkLookup(t, x, nil, chain, fmt.Sprintf("chain %d after RemoveInstance", c))
	}
}

// TestLookupSkipsDeadBeforeSweep looks up while an instance is marked removed but its
// entries are not swept yet (the state RemoveInstance passes through between its lock
// holds): the dead holder is never returned, also when it is the first key's only one.
func TestLookupSkipsDeadBeforeSweep(t *testing.T) {
	chain := randKeys(rand.New(rand.NewPCG(12, 13)), 40)
	x, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	must(t, x.Store("dead", chain))
	must(t, x.Store("live", chain[:30]))
	x.mu.Lock()
	x.live[x.byName["dead"]] = false
	x.mu.Unlock()
	if got := x.Lookup(chain, nil); !slices.Equal(got, []Match{{"live", 30}}) {
		t.Fatalf("Lookup with a dead holder = %v, want live only", got)
	}
	if got := x.Lookup(chain[30:], nil); len(got) != 0 {
		t.Fatalf("Lookup of keys only the dead instance holds = %v, want none", got)
	}
	if got, old := x.Lookup(chain[30:], nil), x.lookupV0(chain[30:], nil); !slices.Equal(got, old) {
		t.Fatalf("Lookup = %v, pre-batching walk = %v", got, old)
	}
}
