package indexer

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// MaxInstancesLimit is the largest MaxInstances a BlockIndex accepts: instance ids are
// 16-bit on the hot path.
const MaxInstancesLimit = 4096

const (
	noID          = 0xFFFF
	inlineHolders = 4
	chunkBits     = 16
	chunkSize     = 1 << chunkBits
	// sweepChunk is how many arena entries RemoveInstance scans per lock hold.
	sweepChunk = 1 << 15
	minSlots   = 1 << 10
)

// BlockIndexConfig configures a BlockIndex.
type BlockIndexConfig struct {
	// MaxKeys bounds the number of distinct keys; beyond it the least recently touched key
	// is evicted. 0 = unbounded.
	MaxKeys int
	// MaxInstances bounds how many instances the index tracks at once (1..MaxInstancesLimit);
	// it sizes the per-key holder bitsets (MaxInstances/64 words, used only by keys with
	// more than four holders). 0 = 1024.
	MaxInstances int
}

// entry is one key in the arena: 32 bytes.
type entry struct {
	key uint64
	// LRU links (arena indices; 0 is the sentinel).
	prev, next uint32
	// ext is 1 + the holder bitset's block when the key has (had) more than
	// inlineHolders holders; 0 when the holders are inline in ids.
	ext uint32
	// n is the number of holders; 0 marks a free arena slot.
	n   uint16
	_   uint16
	ids [inlineHolders]uint16
}

// BlockIndex is the in-memory Index: an open-addressing hash table of 8-byte slots (a
// 32-bit hash fingerprint and a 32-bit arena index; linear probing, load ≤ 0.7,
// backward-shift deletion) over a chunked arena of 32-byte
// entries, which hold up to four holders inline as 16-bit instance ids and switch to a
// bitset beyond, and are threaded on an intrusive LRU list for the MaxKeys bound. One
// RWMutex guards it: lookups share it, writers take it per call (or per sweep chunk).
//
// The LRU is intrusive rather than golang-lru/v2 because that library spends a map entry
// and a list element (two pointers, an interface-free but heap-allocated node) per key,
// which alone exceeds the 64 bytes per (key, instance) goal and allocates on every Store.
type BlockIndex struct {
	mu      sync.RWMutex
	maxKeys int
	maxInst int
	words   int // uint64 words per holder bitset

	chunks []*[chunkSize]entry
	used   uint32 // arena high-water mark (index 0 is the LRU sentinel)
	free   uint32 // free-list head, linked through entry.next

	slots []uint64 // fingerprint (top 32 bits of the hash) << 32 | arena index
	bits  uint
	seed  uint64

	keys      int
	entries   int
	evictions uint64
	sink      uint64 // written by writers only, to keep warm's loads alive

	sets     []uint64
	freeSets []uint32

	byName  map[string]uint16
	names   []string
	live    []bool
	blocks  []int
	freeIDs []uint16
	nextID  int

	scratch sync.Pool
}

var _ Index = (*BlockIndex)(nil)

// NewBlockIndex returns an empty index.
func NewBlockIndex(cfg BlockIndexConfig) (*BlockIndex, error) {
	if cfg.MaxInstances == 0 {
		cfg.MaxInstances = 1024
	}
	if cfg.MaxInstances < 1 || cfg.MaxInstances > MaxInstancesLimit {
		return nil, fmt.Errorf("%w: MaxInstances %d not in 1..%d", ErrConfig, cfg.MaxInstances, MaxInstancesLimit)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: MaxKeys %d is negative", ErrConfig, cfg.MaxKeys)
	}
	x := &BlockIndex{
		maxKeys: cfg.MaxKeys,
		maxInst: cfg.MaxInstances,
		words:   (cfg.MaxInstances + 63) / 64,
		chunks:  []*[chunkSize]entry{new([chunkSize]entry)},
		used:    1,
		slots:   make([]uint64, minSlots),
		bits:    uint(bits.TrailingZeros(minSlots)),
		seed:    rand.Uint64() | 1,
		byName:  make(map[string]uint16),
		names:   make([]string, cfg.MaxInstances),
		live:    make([]bool, cfg.MaxInstances),
		blocks:  make([]int, cfg.MaxInstances),
	}
	maxInst := cfg.MaxInstances
	x.scratch.New = func() any {
		b := make([]uint16, 0, maxInst)
		return &b
	}
	return x, nil
}

// ---- arena, LRU and hash table ----

func (x *BlockIndex) at(i uint32) *entry { return &x.chunks[i>>chunkBits][i&(chunkSize-1)] }

// hash mixes a key with the index's seed. Its top bits are the slot's home and its top
// 32 bits the slot's fingerprint, so probing, rehashing and backward-shift deletion never
// read the arena except to confirm a fingerprint match.
func (x *BlockIndex) hash(key uint64) uint64 { return (key ^ x.seed) * hashMul }

// slotHome returns the home position of an occupied slot from its fingerprint.
func (x *BlockIndex) slotHome(s uint64) uint64 { return (s >> 32) >> (32 - x.bits) }

// findIdx returns the arena index of key, 0 if absent.
func (x *BlockIndex) findIdx(key uint64) uint32 {
	h := x.hash(key)
	fp := h >> 32
	mask := uint64(len(x.slots) - 1)
	for i := h >> (64 - x.bits); ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return 0
		}
		if s>>32 == fp && x.at(uint32(s)).key == key {
			return uint32(s)
		}
	}
}

// placeSlot puts arena index idx of a key with hash h into slots (2^bits long).
func placeSlot(slots []uint64, bits uint, h uint64, idx uint32) {
	mask := uint64(len(slots) - 1)
	for i := h >> (64 - bits); ; i = (i + 1) & mask {
		if slots[i] == 0 {
			slots[i] = h&^0xFFFFFFFF | uint64(idx)
			return
		}
	}
}

func (x *BlockIndex) growSlots() {
	old := x.slots
	x.slots = make([]uint64, 2*len(old))
	adviseHugePages(x.slots)
	x.bits++
	for _, s := range old {
		if s != 0 {
			placeSlot(x.slots, x.bits, s, uint32(s))
		}
	}
}

// deleteSlot removes key's slot with backward-shift deletion.
func (x *BlockIndex) deleteSlot(key uint64) {
	h := x.hash(key)
	fp := h >> 32
	mask := uint64(len(x.slots) - 1)
	i := h >> (64 - x.bits)
	for {
		s := x.slots[i]
		if s == 0 {
			return
		}
		if s>>32 == fp && x.at(uint32(s)).key == key {
			break
		}
		i = (i + 1) & mask
	}
	for {
		j := i
		for {
			j = (j + 1) & mask
			if x.slots[j] == 0 {
				x.slots[i] = 0
				return
			}
			k := x.slotHome(x.slots[j])
			// The entry at j may move to i only if its home is not cyclically in (i, j].
			if i <= j {
				if i < k && k <= j {
					continue
				}
			} else if i < k || k <= j {
				continue
			}
			break
		}
		x.slots[i] = x.slots[j]
		i = j
	}
}

// warmWindow is how many keys ahead the batch operations touch memory.
const warmWindow = 32

// warm touches the home slot of each key, then the arena entry a slot points at, with
// branch-free independent loads so that their cache misses overlap instead of being paid
// one after the other by the dependent probe loops that follow. It returns a value only
// to keep the loads alive.
func (x *BlockIndex) warm(keys []uint64) uint64 {
	var sink uint64
	slots, shift := x.slots, 64-x.bits
	for _, k := range keys {
		sink += slots[x.hash(k)>>shift]
	}
	for _, k := range keys {
		if s := slots[x.hash(k)>>shift]; s != 0 {
			sink += x.at(uint32(s)).key
		}
	}
	return sink
}

func (x *BlockIndex) unlink(i uint32) {
	e := x.at(i)
	x.at(e.prev).next = e.next
	x.at(e.next).prev = e.prev
}

func (x *BlockIndex) linkFront(i uint32) {
	s := x.at(0)
	e := x.at(i)
	e.prev = 0
	e.next = s.next
	x.at(s.next).prev = i
	s.next = i
}

func (x *BlockIndex) touch(i uint32) {
	if x.at(0).next == i {
		return
	}
	x.unlink(i)
	x.linkFront(i)
}

// newKey adds key with one holder and returns its arena index.
func (x *BlockIndex) newKey(key uint64, id uint16) uint32 {
	var i uint32
	if x.free != 0 {
		i = x.free
		x.free = x.at(i).next
	} else {
		if int(x.used) == len(x.chunks)*chunkSize {
			x.chunks = append(x.chunks, new([chunkSize]entry))
		}
		i = x.used
		x.used++
	}
	*x.at(i) = entry{key: key, n: 1, ids: [inlineHolders]uint16{id, noID, noID, noID}}
	if (x.keys+1)*10 > len(x.slots)*7 && x.bits < 32 {
		x.growSlots()
	}
	placeSlot(x.slots, x.bits, x.hash(key), i)
	x.linkFront(i)
	x.keys++
	x.entries++
	x.blocks[id]++
	return i
}

// dropKey deletes the (holder-less) entry i.
func (x *BlockIndex) dropKey(i uint32) {
	e := x.at(i)
	x.deleteSlot(e.key)
	x.unlink(i)
	if e.ext != 0 {
		x.freeSet(e.ext - 1)
	}
	*e = entry{next: x.free}
	x.free = i
	x.keys--
}

func (x *BlockIndex) evictLRU() {
	i := x.at(0).prev
	if i == 0 {
		return
	}
	e := x.at(i)
	x.forHolders(e, func(id uint16) { x.blocks[id]-- })
	x.entries -= int(e.n)
	e.n = 0
	x.dropKey(i)
	x.evictions++
}

// ---- holder sets ----

func (x *BlockIndex) set(b uint32) []uint64 {
	o := int(b) * x.words
	return x.sets[o : o+x.words : o+x.words]
}

func (x *BlockIndex) allocSet() uint32 {
	if n := len(x.freeSets); n > 0 {
		b := x.freeSets[n-1]
		x.freeSets = x.freeSets[:n-1]
		return b
	}
	b := uint32(len(x.sets) / x.words)
	x.sets = append(x.sets, make([]uint64, x.words)...)
	return b
}

func (x *BlockIndex) freeSet(b uint32) {
	clear(x.set(b))
	x.freeSets = append(x.freeSets, b)
}

func (x *BlockIndex) has(e *entry, id uint16) bool {
	if e.ext == 0 {
		return e.ids[0] == id || e.ids[1] == id || e.ids[2] == id || e.ids[3] == id
	}
	return x.sets[int(e.ext-1)*x.words+int(id>>6)]&(1<<(id&63)) != 0
}

// addHolder adds id to e's holders and reports whether it was new.
func (x *BlockIndex) addHolder(e *entry, id uint16) bool {
	if e.ext == 0 {
		empty := -1
		for j, h := range e.ids {
			if h == id {
				return false
			}
			if h == noID && empty < 0 {
				empty = j
			}
		}
		if empty >= 0 {
			e.ids[empty] = id
			e.n++
			return true
		}
		b := x.allocSet()
		s := x.set(b)
		for _, h := range e.ids {
			s[h>>6] |= 1 << (h & 63)
		}
		e.ids = [inlineHolders]uint16{noID, noID, noID, noID}
		e.ext = b + 1
	}
	s := x.set(e.ext - 1)
	if s[id>>6]&(1<<(id&63)) != 0 {
		return false
	}
	s[id>>6] |= 1 << (id & 63)
	e.n++
	return true
}

// delHolder removes id from e's holders and reports whether it was there.
func (x *BlockIndex) delHolder(e *entry, id uint16) bool {
	if e.ext == 0 {
		for j, h := range e.ids {
			if h == id {
				e.ids[j] = noID
				e.n--
				return true
			}
		}
		return false
	}
	s := x.set(e.ext - 1)
	if s[id>>6]&(1<<(id&63)) == 0 {
		return false
	}
	s[id>>6] &^= 1 << (id & 63)
	e.n--
	if e.n <= inlineHolders {
		// Back to inline: keeps memory per entry small once a hot key cools down.
		j := 0
		for w, v := range s {
			for v != 0 {
				t := bits.TrailingZeros64(v)
				v &= v - 1
				e.ids[j] = uint16(w*64 + t)
				j++
			}
		}
		x.freeSet(e.ext - 1)
		e.ext = 0
	}
	return true
}

func (x *BlockIndex) forHolders(e *entry, f func(uint16)) {
	if e.ext == 0 {
		for _, h := range e.ids {
			if h != noID {
				f(h)
			}
		}
		return
	}
	for w, v := range x.set(e.ext - 1) {
		for v != 0 {
			t := bits.TrailingZeros64(v)
			v &= v - 1
			f(uint16(w*64 + t))
		}
	}
}

// appendLive appends e's live holders to act.
func (x *BlockIndex) appendLive(act []uint16, e *entry) []uint16 {
	if e.ext == 0 {
		for _, h := range e.ids {
			if h != noID && x.live[h] {
				act = append(act, h)
			}
		}
		return act
	}
	for w, v := range x.set(e.ext - 1) {
		for v != 0 {
			t := bits.TrailingZeros64(v)
			v &= v - 1
			if h := uint16(w*64 + t); x.live[h] {
				act = append(act, h)
			}
		}
	}
	return act
}

// ---- instances ----

func (x *BlockIndex) idFor(name string) (uint16, error) {
	if id, ok := x.byName[name]; ok {
		return id, nil
	}
	if err := kvroutev1.ValidateID(name); err != nil {
		return 0, fmt.Errorf("%w %q: %w", ErrBadInstance, name, err)
	}
	var id uint16
	if n := len(x.freeIDs); n > 0 {
		id = x.freeIDs[n-1]
		x.freeIDs = x.freeIDs[:n-1]
	} else if x.nextID < x.maxInst {
		id = uint16(x.nextID)
		x.nextID++
	} else {
		return 0, fmt.Errorf("%w: %d instances tracked, cannot add %q", ErrTooManyInstances, x.maxInst, name)
	}
	x.byName[name] = id
	x.names[id] = name
	x.live[id] = true
	x.blocks[id] = 0
	return id, nil
}

// ---- Index ----

// Store implements Index.
func (x *BlockIndex) Store(instance string, keys []uint64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	id, err := x.idFor(instance)
	if err != nil {
		return err
	}
	x.store(id, keys)
	return nil
}

func (x *BlockIndex) store(id uint16, keys []uint64) {
	for w, k := range keys {
		if w%warmWindow == 0 && len(keys) > 1 {
			x.sink += x.warm(keys[w:min(w+warmWindow, len(keys))])
		}
		i := x.findIdx(k)
		if i == 0 {
			if x.maxKeys > 0 && x.keys >= x.maxKeys {
				x.evictLRU()
			}
			x.newKey(k, id)
			continue
		}
		if x.addHolder(x.at(i), id) {
			x.entries++
			x.blocks[id]++
		}
		x.touch(i)
	}
}

// Remove implements Index.
func (x *BlockIndex) Remove(instance string, keys []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if id, ok := x.byName[instance]; ok {
		x.remove(id, keys)
	}
}

func (x *BlockIndex) remove(id uint16, keys []uint64) {
	for w, k := range keys {
		if w%warmWindow == 0 && len(keys) > 1 {
			x.sink += x.warm(keys[w:min(w+warmWindow, len(keys))])
		}
		i := x.findIdx(k)
		if i == 0 {
			continue
		}
		e := x.at(i)
		if x.delHolder(e, id) {
			x.entries--
			x.blocks[id]--
			if e.n == 0 {
				x.dropKey(i)
			}
		}
	}
}

// RemoveInstance implements Index. The instance disappears from lookups at once; its
// entries are then swept in chunks of the arena, releasing the lock between chunks.
func (x *BlockIndex) RemoveInstance(instance string) {
	x.mu.Lock()
	id, ok := x.byName[instance]
	if !ok {
		x.mu.Unlock()
		return
	}
	delete(x.byName, instance)
	x.live[id] = false
	x.mu.Unlock()

	for start := uint32(1); ; start += sweepChunk {
		x.mu.Lock()
		if start >= x.used || x.blocks[id] == 0 {
			x.mu.Unlock()
			break
		}
		end := min(start+sweepChunk, x.used)
		for i := start; i < end && x.blocks[id] > 0; i++ {
			e := x.at(i)
			if e.n == 0 {
				continue
			}
			if x.delHolder(e, id) {
				x.entries--
				x.blocks[id]--
				if e.n == 0 {
					x.dropKey(i)
				}
			}
		}
		x.mu.Unlock()
	}

	x.mu.Lock()
	x.blocks[id] = 0
	x.names[id] = ""
	x.freeIDs = append(x.freeIDs, id)
	x.mu.Unlock()
}

// Apply implements Index.
func (x *BlockIndex) Apply(b *kvroutev1.EventBatch) error {
	if b == nil {
		return fmt.Errorf("%w: nil batch", ErrBadBatch)
	}
	if b.Cleared {
		x.RemoveInstance(b.Instance)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	id, err := x.idFor(b.Instance)
	if err != nil {
		return err
	}
	x.remove(id, b.Removed)
	for _, s := range b.Stored {
		x.store(id, s.Keys)
	}
	return nil
}

// Lookup's walk is not a dependent chain in memory: every key of the chain is known up
// front, so their probes are independent. Lookup resolves the chain in batches
// (findBatch) whose first passes are straight-line independent loads of the keys' slots
// and entries, so that their cache and TLB misses overlap (the out-of-order core keeps
// many in flight); the walk then consumes the batch in order, from L1. Batches start at
// lookupBatchMin keys and double up to lookupBatchMax (4, 8, 16, 32, 32, ...), so a
// lookup whose matched run ends at depth m probes at most about 2m+4 keys, and never more
// than 32 past the end of the run.
//
// Measured against a walk of one probe loop per key (lookup_v0_test.go, docs/benchmarks.md):
// faster when the chain's slots and entries are in L3 (3–28% by median) or DRAM (17–28%);
// slower (7–35% by fastest round) when they sit in L2 and the same chain is looked up
// again and again, where the plain loop is bound by instructions rather than misses and
// the branch predictor learns its data-dependent branches.
const (
	lookupBatchMin = 4
	lookupBatchMax = 32
	// lookupOwnHolders is the candidate list kept on Lookup's stack; a first key with
	// more holders takes a list from the pool.
	lookupOwnHolders = 32
)

// hashMul is hash's multiplier.
const hashMul = 0x9E3779B97F4A7C15

// probeFrom continues key's linear probe (hash h) at slot j; nil if key is absent.
func (x *BlockIndex) probeFrom(key, h, j uint64) *entry {
	fp, mask := h>>32, uint64(len(x.slots)-1)
	for ; ; j = (j + 1) & mask {
		s := x.slots[j]
		if s == 0 {
			return nil
		}
		if s>>32 == fp {
			if e := x.at(uint32(s)); e.key == key {
				return e
			}
		}
	}
}

// findBatch sets t.found[i] to the entry of keys[i] (nil if absent) for the first
// lookupBatchMax keys. Its passes keep the memory reads of different keys independent,
// so that their cache and TLB misses overlap: (1) load every key's home slot; (2) load
// the entry each home slot points at; (3) for the keys whose home slot holds another
// fingerprint (about a quarter of them at the table's load), probe on to the slot whose
// fingerprint matches and load that entry; (4) confirm each key against its entry,
// probing from scratch only when that fails (the key is absent, or a fingerprint
// collided). The first two passes are short straight-line loops, so the out-of-order
// core has most of a batch's misses in flight at once.
func (x *BlockIndex) findBatch(keys []uint64, t *lookupTemp) {
	const m = lookupBatchMax - 1
	slots, chunks, seed := x.slots, x.chunks, x.seed
	shift, mask := (64-x.bits)&63, uint64(len(slots)-1)
	keys = keys[:min(len(keys), lookupBatchMax)]
	hs, sl, ek, out := &t.hs, &t.sl, &t.ek, &t.found
	for i, k := range keys {
		h := (k ^ seed) * hashMul
		hs[i&m] = h
		sl[i&m] = slots[h>>shift]
	}
	for i := range keys {
		// An empty slot points at the sentinel entry 0: harmless.
		c := uint32(sl[i&m])
		ek[i&m] = chunks[c>>chunkBits][c&(chunkSize-1)].key
	}
	for i := range keys {
		h, s := hs[i&m], sl[i&m]
		if s>>32 == h>>32 || s == 0 {
			continue
		}
		for j := (h>>shift + 1) & mask; ; j = (j + 1) & mask {
			s = slots[j]
			if s == 0 || s>>32 == h>>32 {
				break
			}
		}
		sl[i&m] = s
		c := uint32(s)
		ek[i&m] = chunks[c>>chunkBits][c&(chunkSize-1)].key
	}
	for i, k := range keys {
		if s := sl[i&m]; s != 0 && ek[i&m] == k {
			out[i&m] = &chunks[uint32(s)>>chunkBits][uint32(s)&(chunkSize-1)]
			continue
		}
		h := hs[i&m]
		out[i&m] = x.probeFrom(k, h, h>>shift)
	}
}

// lookupTemp is Lookup's working memory for one batch, on its stack (zeroed once per
// lookup): each key's hash, candidate slot, the key of the entry that slot points at,
// and the key's entry once confirmed.
type lookupTemp struct {
	hs, sl, ek [lookupBatchMax]uint64
	found      [lookupBatchMax]*entry
}

// Lookup implements Index.
func (x *BlockIndex) Lookup(keys []uint64, dst []Match) []Match {
	if len(keys) == 0 {
		return dst
	}
	var (
		t          lookupTemp
		own        [lookupOwnHolders]uint16
		bp         *[]uint16
		act        []uint16 // candidates: live instances holding keys[:d]
		prevIDs    [inlineHolders]uint16
		prevInline bool
	)
	x.mu.RLock()
	defer x.mu.RUnlock()
	start := len(dst)
	d := 0
walk:
	for n := lookupBatchMin; d < len(keys); n = min(2*n, lookupBatchMax) {
		batch := keys[d:min(d+n, len(keys))]
		x.findBatch(batch, &t)
		for _, e := range t.found[:len(batch)] {
			if e == nil {
				break walk
			}
			if d == 0 {
				if int(e.n) <= len(own) {
					act = x.appendLive(own[:0], e)
				} else {
					bp = x.scratch.Get().(*[]uint16)
					act = x.appendLive((*bp)[:0], e)
				}
				prevIDs, prevInline = e.ids, e.ext == 0
				if len(act) == 0 {
					break walk
				}
				d++
				continue
			}
			// Consecutive blocks of a chain mostly have the same holders: when a key's
			// inline holders equal the previous key's, nobody drops out and the
			// per-holder checks are skipped.
			if e.ext == 0 {
				if prevInline && e.ids == prevIDs {
					d++
					continue
				}
				prevIDs, prevInline = e.ids, true
			} else {
				prevInline = false
			}
			k := 0
			for _, id := range act {
				if x.has(e, id) {
					act[k] = id
					k++
				} else {
					dst = append(dst, Match{Instance: x.names[id], Blocks: d})
				}
			}
			act = act[:k]
			if k == 0 {
				break walk
			}
			d++
		}
	}
	for _, id := range act {
		dst = append(dst, Match{Instance: x.names[id], Blocks: d})
	}
	slices.Reverse(dst[start:])
	if bp != nil {
		// The pooled list has room for every instance, so act never outgrew it.
		x.scratch.Put(bp)
	}
	return dst
}

// Blocks implements Index.
func (x *BlockIndex) Blocks(instance string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if id, ok := x.byName[instance]; ok {
		return x.blocks[id]
	}
	return 0
}

// InstanceKeys implements Index.
func (x *BlockIndex) InstanceKeys(instance string, dst []uint64) []uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	id, ok := x.byName[instance]
	if !ok {
		return dst
	}
	start := len(dst)
	for i := uint32(1); i < x.used; i++ {
		if e := x.at(i); e.n != 0 && x.has(e, id) {
			dst = append(dst, e.key)
		}
	}
	slices.Sort(dst[start:])
	return dst
}

// Stats implements Index.
func (x *BlockIndex) Stats() IndexStats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return IndexStats{Keys: x.keys, Entries: x.entries, Instances: len(x.byName), Evictions: x.evictions, MaxKeys: x.maxKeys}
}
