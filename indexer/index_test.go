package indexer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// refIndex is the naive reference: a map of sets with an LRU by touch counter. It
// implements Index so the shared suite checks the suite itself, too.
type refIndex struct {
	mu        sync.Mutex
	maxKeys   int
	holders   map[uint64]map[string]bool
	touched   map[uint64]uint64
	clock     uint64
	evictions uint64
}

func newRefIndex(maxKeys int) *refIndex {
	return &refIndex{maxKeys: maxKeys, holders: map[uint64]map[string]bool{}, touched: map[uint64]uint64{}}
}

func (r *refIndex) Store(inst string, keys []uint64) error {
	if err := kvroutev1.ValidateID(inst); err != nil {
		return fmt.Errorf("%w: %w", ErrBadInstance, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if r.holders[k] == nil {
			if r.maxKeys > 0 && len(r.holders) >= r.maxKeys {
				var oldest uint64
				first := true
				for kk, t := range r.touched {
					if first || t < r.touched[oldest] {
						oldest, first = kk, false
					}
				}
				delete(r.holders, oldest)
				delete(r.touched, oldest)
				r.evictions++
			}
			r.holders[k] = map[string]bool{}
		}
		r.holders[k][inst] = true
		r.clock++
		r.touched[k] = r.clock
	}
	return nil
}

func (r *refIndex) Remove(inst string, keys []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if h := r.holders[k]; h != nil {
			delete(h, inst)
			if len(h) == 0 {
				delete(r.holders, k)
				delete(r.touched, k)
			}
		}
	}
}

func (r *refIndex) RemoveInstance(inst string) {
	r.mu.Lock()
	var keys []uint64
	for k, h := range r.holders {
		if h[inst] {
			keys = append(keys, k)
		}
	}
	r.mu.Unlock()
	r.Remove(inst, keys)
}

func (r *refIndex) Apply(b *kvroutev1.EventBatch) error {
	if b.Cleared {
		r.RemoveInstance(b.Instance)
	}
	r.Remove(b.Instance, b.Removed)
	for _, s := range b.Stored {
		if err := r.Store(b.Instance, s.Keys); err != nil {
			return err
		}
	}
	return nil
}

func (r *refIndex) Lookup(keys []uint64, dst []Match) []Match {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(keys) == 0 {
		return dst
	}
	start := len(dst)
	for inst := range r.holders[keys[0]] {
		n := 0
		for n < len(keys) && r.holders[keys[n]][inst] {
			n++
		}
		dst = append(dst, Match{Instance: inst, Blocks: n})
	}
	sortMatches(dst[start:])
	return dst
}

func (r *refIndex) Blocks(inst string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.holders {
		if h[inst] {
			n++
		}
	}
	return n
}

func (r *refIndex) InstanceKeys(inst string, dst []uint64) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := len(dst)
	for k, h := range r.holders {
		if h[inst] {
			dst = append(dst, k)
		}
	}
	slices.Sort(dst[start:])
	return dst
}

func (r *refIndex) Stats() IndexStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := IndexStats{Keys: len(r.holders), Evictions: r.evictions, MaxKeys: r.maxKeys}
	insts := map[string]bool{}
	for _, h := range r.holders {
		st.Entries += len(h)
		for i := range h {
			insts[i] = true
		}
	}
	st.Instances = len(insts)
	return st
}

// sortMatches orders matches best first, ties by instance, for comparisons.
func sortMatches(m []Match) {
	sort.Slice(m, func(i, j int) bool {
		if m[i].Blocks != m[j].Blocks {
			return m[i].Blocks > m[j].Blocks
		}
		return m[i].Instance < m[j].Instance
	})
}

// implementations lists every Index the shared suite runs over.
func implementations(maxKeys int) map[string]func(t testing.TB) Index {
	return map[string]func(t testing.TB) Index{
		"block": func(t testing.TB) Index {
			x, err := NewBlockIndex(BlockIndexConfig{MaxKeys: maxKeys})
			if err != nil {
				t.Fatal(err)
			}
			return x
		},
		"instrumented": func(t testing.TB) Index {
			x, err := NewBlockIndex(BlockIndexConfig{MaxKeys: maxKeys})
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewInstrumented(x, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		"reference": func(testing.TB) Index { return newRefIndex(maxKeys) },
	}
}

func TestCommonIndexBehavior(t *testing.T) {
	for name, mk := range implementations(0) {
		t.Run(name, func(t *testing.T) { testCommonIndexBehavior(t, mk) })
	}
}

func testCommonIndexBehavior(t *testing.T, mk func(testing.TB) Index) {
	chain := []uint64{11, 12, 13, 14, 15, 16}

	t.Run("empty", func(t *testing.T) {
		x := mk(t)
		if got := x.Lookup(chain, nil); len(got) != 0 {
			t.Fatalf("empty index matched %v", got)
		}
		if got := x.Lookup(nil, nil); len(got) != 0 {
			t.Fatalf("empty key chain matched %v", got)
		}
	})

	t.Run("longest leading run per instance", func(t *testing.T) {
		x := mk(t)
		must(t, x.Store("a", chain[:4]))
		must(t, x.Store("b", chain[:2]))
		must(t, x.Store("c", chain[1:])) // no first block: never matches
		must(t, x.Store("d", []uint64{11, 13, 14, 15}))
		got := x.Lookup(chain, nil)
		sortMatches(got)
		want := []Match{{"a", 4}, {"b", 2}, {"d", 1}}
		if !slices.Equal(got, want) {
			t.Fatalf("Lookup = %v, want %v", got, want)
		}
		if n := x.Blocks("a"); n != 4 {
			t.Fatalf("Blocks(a) = %d, want 4", n)
		}
		st := x.Stats()
		if st.Keys != 6 || st.Entries != 4+2+5+4 {
			t.Fatalf("Stats = %+v, want 6 keys, 15 entries", st)
		}
	})

	t.Run("best first", func(t *testing.T) {
		x := mk(t)
		must(t, x.Store("short", chain[:1]))
		must(t, x.Store("long", chain))
		must(t, x.Store("mid", chain[:3]))
		got := x.Lookup(chain, nil)
		for i := 1; i < len(got); i++ {
			if got[i].Blocks > got[i-1].Blocks {
				t.Fatalf("Lookup not best first: %v", got)
			}
		}
		if len(got) != 3 || got[0] != (Match{"long", 6}) {
			t.Fatalf("Lookup = %v", got)
		}
	})

	t.Run("appends to dst", func(t *testing.T) {
		x := mk(t)
		must(t, x.Store("a", chain))
		dst := []Match{{"keep", 9}}
		got := x.Lookup(chain, dst)
		if len(got) != 2 || got[0] != (Match{"keep", 9}) || got[1] != (Match{"a", 6}) {
			t.Fatalf("Lookup(dst) = %v", got)
		}
	})

	t.Run("store is idempotent", func(t *testing.T) {
		x := mk(t)
		must(t, x.Store("a", chain))
		must(t, x.Store("a", chain))
		if st := x.Stats(); st.Keys != 6 || st.Entries != 6 {
			t.Fatalf("Stats after double store = %+v", st)
		}
	})

	t.Run("remove", func(t *testing.T) {
		x := mk(t)
		must(t, x.Store("a", chain))
		must(t, x.Store("b", chain))
		x.Remove("a", chain[2:3])
		x.Remove("a", []uint64{999}) // unknown key: ignored
		x.Remove("zz", chain)        // unknown instance: ignored
		got := x.Lookup(chain, nil)
		sortMatches(got)
		if want := []Match{{"b", 6}, {"a", 2}}; !slices.Equal(got, want) {
			t.Fatalf("Lookup = %v, want %v", got, want)
		}
		x.Remove("b", chain)
		x.Remove("a", chain)
		if st := x.Stats(); st.Keys != 0 || st.Entries != 0 {
			t.Fatalf("Stats after removing all = %+v", st)
		}
		if got := x.Lookup(chain, nil); len(got) != 0 {
			t.Fatalf("Lookup after removing all = %v", got)
		}
	})

	t.Run("remove instance", func(t *testing.T) {
		x := mk(t)
		must(t, x.Store("a", chain))
		must(t, x.Store("b", chain[:3]))
		x.RemoveInstance("a")
		x.RemoveInstance("nobody")
		if got := x.Lookup(chain, nil); !slices.Equal(got, []Match{{"b", 3}}) {
			t.Fatalf("Lookup after RemoveInstance = %v", got)
		}
		if n := x.Blocks("a"); n != 0 {
			t.Fatalf("Blocks(a) = %d after RemoveInstance", n)
		}
		if st := x.Stats(); st.Keys != 3 || st.Entries != 3 {
			t.Fatalf("Stats = %+v, want 3 keys and entries", st)
		}
		must(t, x.Store("a", chain[:1]))
		got := x.Lookup(chain, nil)
		sortMatches(got)
		if want := []Match{{"b", 3}, {"a", 1}}; !slices.Equal(got, want) {
			t.Fatalf("re-added instance: Lookup = %v, want %v", got, want)
		}
	})

	t.Run("many holders", func(t *testing.T) {
		x := mk(t)
		for i := range 40 {
			must(t, x.Store(fmt.Sprintf("i%02d", i), chain[:1+i%len(chain)]))
		}
		got := x.Lookup(chain, nil)
		if len(got) != 40 {
			t.Fatalf("Lookup returned %d matches, want 40", len(got))
		}
		for _, m := range got {
			var i int
			fmt.Sscanf(m.Instance, "i%02d", &i)
			if m.Blocks != 1+i%len(chain) {
				t.Fatalf("match %v, want %d blocks", m, 1+i%len(chain))
			}
		}
		// Drop holders until inline again; the survivors must still match.
		for i := range 38 {
			x.Remove(fmt.Sprintf("i%02d", i), chain)
		}
		got = x.Lookup(chain, nil)
		sortMatches(got)
		if want := []Match{{"i39", 4}, {"i38", 3}}; !slices.Equal(got, want) {
			t.Fatalf("after shrinking: Lookup = %v, want %v", got, want)
		}
	})

	t.Run("apply order", func(t *testing.T) {
		x := mk(t)
		must(t, x.Store("a", []uint64{1, 2, 3}))
		must(t, x.Apply(&kvroutev1.EventBatch{Instance: "a", Epoch: 2, Seq: 1, Cleared: true,
			Stored: []*kvroutev1.Stored{{Keys: chain[:2]}, {ParentKey: chain[1], Keys: chain[2:3]}}}))
		if got := x.InstanceKeys("a", nil); !slices.Equal(got, chain[:3]) {
			t.Fatalf("after cleared batch keys = %v, want %v", got, chain[:3])
		}
		must(t, x.Apply(&kvroutev1.EventBatch{Instance: "a", Epoch: 2, Seq: 2, Removed: chain[2:3],
			Stored: []*kvroutev1.Stored{{ParentKey: chain[2], Keys: chain[3:5]}}}))
		if got := x.InstanceKeys("a", nil); !slices.Equal(got, []uint64{11, 12, 14, 15}) {
			t.Fatalf("after batch keys = %v", got)
		}
	})

	t.Run("invalid instance", func(t *testing.T) {
		x := mk(t)
		for _, bad := range []string{"", "a.b", "a b", strings.Repeat("x", 129)} {
			if err := x.Store(bad, chain); !errors.Is(err, ErrBadInstance) {
				t.Fatalf("Store(%q) err = %v, want ErrBadInstance", bad, err)
			}
		}
		if st := x.Stats(); st.Keys != 0 {
			t.Fatalf("bad stores left %d keys", st.Keys)
		}
	})
}

func TestEvictionBehavior(t *testing.T) {
	for name, mk := range implementations(4) {
		t.Run(name, func(t *testing.T) {
			x := mk(t)
			must(t, x.Store("a", []uint64{1, 2, 3, 4}))
			must(t, x.Store("b", []uint64{1})) // touches 1: now 2 is least recent
			must(t, x.Store("a", []uint64{5}))
			st := x.Stats()
			if st.Keys != 4 || st.Evictions != 1 {
				t.Fatalf("Stats = %+v, want 4 keys, 1 eviction", st)
			}
			if got := x.InstanceKeys("a", nil); !slices.Equal(got, []uint64{1, 3, 4, 5}) {
				t.Fatalf("keys of a = %v, want key 2 evicted", got)
			}
			if n := x.Blocks("a"); n != 4 {
				t.Fatalf("Blocks(a) = %d, want 4", n)
			}
			must(t, x.Store("b", []uint64{6, 7}))
			if got := x.InstanceKeys("b", nil); !slices.Equal(got, []uint64{1, 6, 7}) {
				t.Fatalf("keys of b = %v", got)
			}
			if st := x.Stats(); st.Evictions != 3 || st.Keys != 4 || st.Entries != 5 {
				t.Fatalf("Stats = %+v, want 3 evictions, 4 keys, 5 entries", st)
			}
		})
	}
}

func TestTooManyInstances(t *testing.T) {
	x, err := NewBlockIndex(BlockIndexConfig{MaxInstances: 2})
	must(t, err)
	must(t, x.Store("a", []uint64{1}))
	must(t, x.Store("b", []uint64{1}))
	if err := x.Store("c", []uint64{1}); !errors.Is(err, ErrTooManyInstances) {
		t.Fatalf("third instance: err = %v, want ErrTooManyInstances", err)
	}
	x.RemoveInstance("a")
	must(t, x.Store("c", []uint64{1}))
	if got := x.Lookup([]uint64{1}, nil); len(got) != 2 {
		t.Fatalf("Lookup = %v, want b and c", got)
	}
	for _, bad := range []BlockIndexConfig{{MaxInstances: -1}, {MaxInstances: MaxInstancesLimit + 1}, {MaxKeys: -5}} {
		if _, err := NewBlockIndex(bad); !errors.Is(err, ErrConfig) {
			t.Fatalf("NewBlockIndex(%+v) err = %v, want ErrConfig", bad, err)
		}
	}
}

// TestRandomizedAgainstReference drives the index and the naive reference with the same
// random operations, on chains that share prefixes, and compares every observable.
func TestRandomizedAgainstReference(t *testing.T) {
	seeds := uint64(4)
	if testing.Short() {
		seeds = 2
	}
	for _, maxKeys := range []int{0, 300} {
		for seed := range seeds {
			t.Run(fmt.Sprintf("max%d/seed%d", maxKeys, seed), func(t *testing.T) {
				randomized(t, seed, maxKeys, 4000)
			})
		}
	}
}

func randomized(t *testing.T, seed uint64, maxKeys, ops int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	x, err := NewBlockIndex(BlockIndexConfig{MaxKeys: maxKeys, MaxInstances: 64})
	must(t, err)
	ref := newRefIndex(maxKeys)
	insts := make([]string, 24)
	for i := range insts {
		insts[i] = fmt.Sprintf("inst-%d", i)
	}
	// A small key universe of chains: chain c, depth d has key c*100+d+1.
	chain := func(c, n int) []uint64 {
		k := make([]uint64, n)
		for d := range k {
			k[d] = uint64(c*100 + d + 1)
		}
		return k
	}
	for op := range ops {
		inst := insts[rng.IntN(len(insts))]
		c := rng.IntN(12)
		switch r := rng.IntN(100); {
		case r < 45:
			keys := chain(c, 1+rng.IntN(30))
			keys = keys[rng.IntN(2)*rng.IntN(len(keys)):] // sometimes a chain tail only
			must(t, x.Store(inst, keys))
			must(t, ref.Store(inst, keys))
		case r < 75:
			keys := chain(c, 30)
			lo := rng.IntN(30)
			keys = keys[lo : lo+rng.IntN(30-lo)+1]
			x.Remove(inst, keys)
			ref.Remove(inst, keys)
		case r < 78:
			x.RemoveInstance(inst)
			ref.RemoveInstance(inst)
		case r < 80:
			b := &kvroutev1.EventBatch{Instance: inst, Cleared: true, Stored: []*kvroutev1.Stored{{Keys: chain(c, 5)}}}
			must(t, x.Apply(b))
			must(t, ref.Apply(b))
		default:
			q := chain(c, 1+rng.IntN(30))
			got := x.Lookup(q, nil)
			want := ref.Lookup(q, nil)
			sortMatches(got)
			if !slices.Equal(got, want) {
				t.Fatalf("op %d: Lookup(chain %d, %d keys) = %v, want %v", op, c, len(q), got, want)
			}
		}
		if op%97 == 0 || op == ops-1 {
			xs, rs := x.Stats(), ref.Stats()
			if xs.Keys != rs.Keys || xs.Entries != rs.Entries || xs.Evictions != rs.Evictions {
				t.Fatalf("op %d: Stats = %+v, reference %+v", op, xs, rs)
			}
			for _, in := range insts {
				if a, b := x.InstanceKeys(in, nil), ref.InstanceKeys(in, nil); !slices.Equal(a, b) {
					t.Fatalf("op %d: keys of %s = %v, reference %v", op, in, a, b)
				}
				if a, b := x.Blocks(in), ref.Blocks(in); a != b {
					t.Fatalf("op %d: Blocks(%s) = %d, reference %d", op, in, a, b)
				}
			}
		}
	}
}

// TestConcurrentStress runs writers, instance removals and lookups at once (run it with
// -race) and checks lookups stay consistent: every match is a prefix of the chain that
// some writer stored, never longer than the chain, and each instance at most once.
func TestConcurrentStress(t *testing.T) {
	for name, mk := range implementations(5000) {
		if name == "reference" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			x := mk(t)
			iters := 3000
			if testing.Short() {
				iters = 800
			}
			chain := make([]uint64, 64)
			for i := range chain {
				chain[i] = uint64(1000 + i)
			}
			var writers, readers sync.WaitGroup
			var stop atomic.Bool
			for w := range 4 {
				writers.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					inst := fmt.Sprintf("w%d", w)
					other := make([]uint64, 16)
					for i := range iters {
						n := 1 + rng.IntN(len(chain))
						if err := x.Store(inst, chain[:n]); err != nil {
							t.Error(err)
							return
						}
						for j := range other {
							other[j] = rng.Uint64()
						}
						if err := x.Store(inst, other); err != nil {
							t.Error(err)
							return
						}
						x.Remove(inst, chain[rng.IntN(n):n])
						if i%200 == 0 {
							x.RemoveInstance(inst)
						}
						if st := x.Stats(); st.Keys > 5000 {
							t.Errorf("Keys %d over MaxKeys 5000", st.Keys)
							return
						}
					}
				})
			}
			var lookups atomic.Int64
			for range 2 {
				readers.Go(func() {
					dst := make([]Match, 0, 16)
					for !stop.Load() {
						dst = x.Lookup(chain, dst[:0])
						seen := map[string]bool{}
						for _, m := range dst {
							if m.Blocks < 1 || m.Blocks > len(chain) || seen[m.Instance] || !strings.HasPrefix(m.Instance, "w") {
								t.Errorf("bad match %v in %v", m, dst)
								return
							}
							seen[m.Instance] = true
						}
						lookups.Add(1)
						runtime.Gosched()
					}
				})
			}
			writers.Wait()
			stop.Store(true)
			readers.Wait()
			if lookups.Load() == 0 {
				t.Fatal("no lookup ran")
			}
			// After the dust settles the counters must agree with the contents.
			st := x.Stats()
			total := 0
			for w := range 4 {
				total += len(x.InstanceKeys(fmt.Sprintf("w%d", w), nil))
			}
			if total != st.Entries {
				t.Fatalf("Entries %d, but instances hold %d keys", st.Entries, total)
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTableChurn grows, shrinks and refills the hash table far past its initial size and
// checks membership exactly (backward-shift deletion across wrap-around and growth).
func TestTableChurn(t *testing.T) {
	x, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	rng := rand.New(rand.NewPCG(11, 12))
	n := 60_000
	if testing.Short() {
		n = 20_000
	}
	keys := randKeys(rng, n)
	must(t, x.Store("a", keys))
	gone := map[uint64]bool{}
	var rm []uint64
	for _, k := range keys {
		if rng.IntN(2) == 0 {
			rm = append(rm, k)
			gone[k] = true
		}
	}
	x.Remove("a", rm)
	for _, k := range keys {
		got := x.Lookup([]uint64{k}, nil)
		if gone[k] != (len(got) == 0) {
			t.Fatalf("key %x: removed=%v but lookup = %v", k, gone[k], got)
		}
	}
	if st := x.Stats(); st.Keys != n-len(rm) || x.Blocks("a") != n-len(rm) {
		t.Fatalf("Stats = %+v, want %d keys", st, n-len(rm))
	}
	must(t, x.Store("b", rm))
	x.RemoveInstance("a")
	if got := x.InstanceKeys("b", nil); len(got) != len(rm) || x.Stats().Keys != len(rm) {
		t.Fatalf("after refill and RemoveInstance: %d keys of b, stats %+v, want %d", len(got), x.Stats(), len(rm))
	}
}

// TestLookupZeroAllocs checks the contract's zero allocations when dst has room, on the
// bare index and through the Service (with its metrics).
func TestLookupZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	x, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	chain := randKeys(rand.New(rand.NewPCG(1, 1)), 512)
	for i := range 8 {
		must(t, x.Store(fmt.Sprintf("i%d", i), chain[:64*(i+1)]))
	}
	must(t, x.Store("bits", chain[:3])) // nine holders: a bitset key
	dst := make([]Match, 0, 16)
	if n := testing.AllocsPerRun(200, func() { dst = x.Lookup(chain, dst[:0]) }); n != 0 {
		t.Fatalf("BlockIndex.Lookup: %v allocs per run", n)
	}
	if len(dst) != 9 || dst[0] != (Match{"i7", 512}) {
		t.Fatalf("Lookup = %v", dst)
	}
	// A first key with more holders than Lookup keeps on its stack takes a pooled list.
	y, err := NewBlockIndex(BlockIndexConfig{})
	must(t, err)
	for i := range lookupOwnHolders + 8 {
		must(t, y.Store(fmt.Sprintf("p%d", i), chain[:1+i]))
	}
	many := make([]Match, 0, 64)
	if n := testing.AllocsPerRun(200, func() { many = y.Lookup(chain, many[:0]) }); n != 0 {
		t.Fatalf("BlockIndex.Lookup, %d holders: %v allocs per run", lookupOwnHolders+8, n)
	}
	if len(many) != lookupOwnHolders+8 || many[0].Blocks != lookupOwnHolders+8 {
		t.Fatalf("Lookup = %v", many)
	}
	url := startNATS(t)
	e := startService(t, url, testConfig())
	must(t, e.svc.Index().Store("a", chain))
	if n := testing.AllocsPerRun(200, func() { dst = e.svc.Lookup(chain, dst[:0]) }); n != 0 {
		t.Fatalf("Service.Lookup: %v allocs per run", n)
	}
}
