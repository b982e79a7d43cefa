package indexer

import "slices"

// lookupV0 is BlockIndex.Lookup as of commit 55970e3 (one probe loop per key, walked in
// order, scratch from the sync.Pool), kept verbatim so that the benchmarks compare the
// batched walk against it in one binary and the tests check that both agree.
func (x *BlockIndex) lookupV0(keys []uint64, dst []Match) []Match {
	if len(keys) == 0 {
		return dst
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := x.findIdx(keys[0])
	if i == 0 {
		return dst
	}
	bp := x.scratch.Get().(*[]uint16)
	e := x.at(i)
	act := x.appendLive((*bp)[:0], e)
	// Consecutive blocks of a chain mostly have the same holders: when a key's inline
	// holders equal the previous key's, nobody drops out and the per-holder checks are skipped.
	prevIDs, prevInline := e.ids, e.ext == 0
	slots, shift, mask := x.slots, 64-x.bits, uint64(len(x.slots)-1)
	start := len(dst)
	d := 1
	chunks, seed := x.chunks, x.seed
	for ; d < len(keys) && len(act) > 0; d++ {
		key := keys[d]
		h := (key ^ seed) * 0x9E3779B97F4A7C15
		fp := h >> 32
		i = 0
		for j := h >> shift; ; j = (j + 1) & mask {
			s := slots[j]
			if s == 0 {
				break
			}
			if s>>32 == fp {
				if c := &chunks[uint32(s)>>chunkBits][uint32(s)&(chunkSize-1)]; c.key == key {
					e, i = c, uint32(s)
					break
				}
			}
		}
		if i == 0 {
			break
		}
		if e.ext == 0 {
			if prevInline && e.ids == prevIDs {
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
	}
	for _, id := range act {
		dst = append(dst, Match{Instance: x.names[id], Blocks: d})
	}
	slices.Reverse(dst[start:])
	*bp = act[:0]
	x.scratch.Put(bp)
	return dst
}
