package agent

import "math/bits"

// table is an open-addressing hash table from uint64 to V (linear probing, power-of-two
// capacity, backward-shift deletion, ≤ 3/4 full). It is the mirror's hot data
// structure: get and upsert return a pointer into the table, so a lookup-modify-store is
// one probe instead of the two of a Go map, and there is no per-operation allocation.
// A pointer is valid until the next upsert or del. Not safe for concurrent use.
type table[V any] struct {
	slots []slot[V]
	shift uint8 // 64 - log2(len(slots))
	n     int   // used slots, excluding the zero key
	// The zero key lives outside the slots (a zero slot key means "empty").
	zeroUsed bool
	zero     V
}

type slot[V any] struct {
	key uint64 // 0 = empty
	val V
}

const minTableSlots = 16

// hashSlot mixes k (engine hashes and keys may be structured) and picks a slot.
func (t *table[V]) home(k uint64) int {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return int(k >> t.shift)
}

// Len returns the number of keys held.
func (t *table[V]) Len() int {
	if t.zeroUsed {
		return t.n + 1
	}
	return t.n
}

// get returns the value of k, or nil.
func (t *table[V]) get(k uint64) *V {
	if k == 0 {
		if t.zeroUsed {
			return &t.zero
		}
		return nil
	}
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			return &s.val
		}
		if s.key == 0 {
			return nil
		}
	}
}

// upsert returns the value slot of k, inserting a zero value if k was absent (existed
// reports which).
func (t *table[V]) upsert(k uint64) (v *V, existed bool) {
	if k == 0 {
		if !t.zeroUsed {
			var zero V
			t.zero, t.zeroUsed = zero, true
			return &t.zero, false
		}
		return &t.zero, true
	}
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			return &s.val, true
		}
		if s.key == 0 {
			s.key = k
			var zero V
			s.val = zero
			t.n++
			return &s.val, false
		}
	}
}

// del removes k and reports whether it was present.
func (t *table[V]) del(k uint64) bool {
	if k == 0 {
		was := t.zeroUsed
		var zero V
		t.zero, t.zeroUsed = zero, false
		return was
	}
	if t.n == 0 {
		return false
	}
	mask := len(t.slots) - 1
	i := t.home(k)
	for {
		if t.slots[i].key == k {
			break
		}
		if t.slots[i].key == 0 {
			return false
		}
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move later members of the probe run into the hole when
	// the hole lies between their home slot and where they sit.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &t.slots[j]
		if s.key == 0 {
			break
		}
		h := t.home(s.key)
		if (j-h)&mask >= (j-i)&mask {
			t.slots[i] = *s
			i = j
		}
	}
	var zero slot[V]
	t.slots[i] = zero
	t.n--
	return true
}

func (t *table[V]) grow() {
	size := max(len(t.slots)*2, minTableSlots)
	old := t.slots
	t.slots = make([]slot[V], size)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	mask := size - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// reset empties the table, keeping its capacity.
func (t *table[V]) reset() {
	clear(t.slots)
	t.n = 0
	var zero V
	t.zero, t.zeroUsed = zero, false
}

// each calls fn for every key and its value, in no particular order; fn must not
// insert or delete.
func (t *table[V]) each(fn func(k uint64, v *V)) {
	if t.zeroUsed {
		fn(0, &t.zero)
	}
	if t.n == 0 {
		return
	}
	for i := range t.slots {
		if s := &t.slots[i]; s.key != 0 {
			fn(s.key, &s.val)
		}
	}
}
