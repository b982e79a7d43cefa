package tokenizer

import "math/bits"

// mergeTable maps a pair of token ids to its merge rule: open addressing with
// linear probing over one flat array, multiplicative hashing. The BPE loop does one
// lookup per adjacent pair, most of them misses, so this lookup is the cold encoder's
// inner loop; a flat table is about twice as fast as a Go map for it.
type mergeTable struct {
	slots []mergeSlot
	shift uint
}

type mergeSlot struct {
	key  uint64 // pairKey, or emptySlot
	rank uint32
	id   uint32
}

const emptySlot = ^uint64(0) // pairKey of two 0xFFFFFFFF ids, never a real vocabulary pair

func newMergeTable(n int) *mergeTable {
	size := 1 << bits.Len(uint(n*2)) // load factor ≤ 1/2
	t := &mergeTable{slots: make([]mergeSlot, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	for i := range t.slots {
		t.slots[i].key = emptySlot
	}
	return t
}

func (t *mergeTable) index(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put stores a rule; the first rule for a pair wins (lowest rank), like the reference.
func (t *mergeTable) put(k uint64, mg merge) {
	mask := uint64(len(t.slots) - 1)
	for i := t.index(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			return
		}
		if s.key == emptySlot {
			*s = mergeSlot{key: k, rank: mg.rank, id: mg.id}
			return
		}
	}
}

func (t *mergeTable) get(k uint64) (merge, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := t.index(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			return merge{rank: s.rank, id: s.id}, true
		}
		if s.key == emptySlot {
			return merge{}, false
		}
	}
}
