package tokenizer

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"unsafe"
)

// segmentCache is the bounded LRU of token ids per text segment. It is keyed by a
// hash of a sample of the text (its length, both ends and a few bytes of every
// 4 KiB) and confirms a hit by comparing the whole text, so a 36 KB system prompt
// costs one comparison — O(1) when the caller hands in the same string again —
// instead of hashing every byte. Texts whose samples collide simply replace each
// other. Keys are valid UTF-8 (segments are cached after validation), so a hit
// also proves the looked-up text valid.
type segmentCache struct {
	mu      sync.Mutex
	seed    maphash.Seed
	max     int
	entries map[uint64]*segEntry
	head    segEntry // sentinel of the recency list: head.next is the newest
}

type segEntry struct {
	key        uint64
	text       string
	ids        []uint32
	prev, next *segEntry
}

func newSegmentCache(entries int) *segmentCache {
	c := &segmentCache{seed: maphash.MakeSeed(), max: entries, entries: make(map[uint64]*segEntry, entries)}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

// sampleHash hashes len(s), the first and last 256 bytes and 16 bytes of every
// 4 KiB in between (all of s when it is short).
func sampleHash(seed maphash.Seed, s string) uint64 {
	const edge, stride, chunk = 256, 4 << 10, 16
	if len(s) <= 2*edge+stride {
		return maphash.String(seed, s)
	}
	var h maphash.Hash
	h.SetSeed(seed)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.WriteString(s[:edge])
	for i := edge; i+chunk <= len(s)-edge; i += stride {
		h.WriteString(s[i : i+chunk])
	}
	h.WriteString(s[len(s)-edge:])
	return h.Sum64()
}

func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// get returns the cached ids of text (shared: callers must not modify them).
func (c *segmentCache) get(text string) ([]uint32, bool) {
	k := sampleHash(c.seed, text)
	c.mu.Lock()
	e := c.entries[k]
	if e == nil {
		c.mu.Unlock()
		return nil, false
	}
	c.unlink(e)
	c.pushFront(e)
	cached, ids := e.text, e.ids
	c.mu.Unlock()
	if !sameString(cached, text) {
		return nil, false
	}
	return ids, true
}

// add stores a copy of ids for text (which must be valid UTF-8 and not change).
func (c *segmentCache) add(text string, ids []uint32) {
	k := sampleHash(c.seed, text)
	e := &segEntry{key: k, text: text, ids: append([]uint32(nil), ids...)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.entries[k]; old != nil {
		c.unlink(old)
		delete(c.entries, k)
	}
	for len(c.entries) >= c.max {
		oldest := c.head.prev
		c.unlink(oldest)
		delete(c.entries, oldest.key)
	}
	c.entries[k] = e
	c.pushFront(e)
}

func (c *segmentCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func (c *segmentCache) unlink(e *segEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *segmentCache) pushFront(e *segEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}
