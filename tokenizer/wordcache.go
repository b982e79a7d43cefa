package tokenizer

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// wordCache holds BPE results per pre-token: a direct-mapped table of immutable
// entries, read without locks. A word lands in one slot chosen by its hash; a new
// word evicts whatever held that slot. Hits compare the whole word, so a result is
// only ever reused for the identical word. Reads are a hash, an atomic load and a
// short comparison — cheaper than an LRU's lock and list update, which mattered on
// the routing path where a new question is a few hundred cached words.
type wordCache struct {
	seed  maphash.Seed
	mask  uint64
	slots []atomic.Pointer[wordEntry]
}

type wordEntry struct {
	word string
	ids  []uint32
}

// newWordCache sizes the table to the next power of two ≥ entries.
func newWordCache(entries int) *wordCache {
	n := 1 << bits.Len(uint(entries-1))
	return &wordCache{seed: maphash.MakeSeed(), mask: uint64(n - 1), slots: make([]atomic.Pointer[wordEntry], n)}
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	e := c.slots[maphash.String(c.seed, w)&c.mask].Load()
	if e == nil || e.word != w {
		return nil, false
	}
	return e.ids, true
}

// add stores copies of w and ids.
func (c *wordCache) add(w string, ids []uint32) {
	e := &wordEntry{word: w, ids: append([]uint32(nil), ids...)}
	c.slots[maphash.String(c.seed, w)&c.mask].Store(e)
}
