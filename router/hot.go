package router

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/kvroute/kvroute/kvblock"
)

// hotBlock is the block size, in tokens, the hot-prefix tracker cuts prompts into: its
// identity keys and stored prefixes are whole blocks of it (vLLM's default; an instance
// with another block size still caches every whole block of its own size).
const hotBlock = kvblock.DefaultBlockSize

// maxPrewarmPrefixes bounds Config.PrewarmPrefixes (the tracker keeps four times as many).
const maxPrewarmPrefixes = 4096

// hotMinHits: a prefix is replayed only once this many successful requests shared it; a
// prompt seen once is not a shared prefix.
const hotMinHits = 2

// hotPrefixes is a bounded top-K of the prompt prefixes the router routed, by decayed
// request count (Space-Saving with forward decay). Each entry is identified by the key of
// the prompt's first keyTokens tokens under (model, cache_salt), and keeps the longest
// prefix, in whole blocks and at most maxTokens, that every request counted for it shared
// — the part an engine caches for all of them — as token ids, so it replays exactly.
//
// Memory is fixed once every slot was used: capacity entries of at most maxTokens ids.
// record takes one mutex and does not allocate for a known prefix, nor for a new one once
// the slot it takes over has grown its buffer. Safe for concurrent use.
type hotPrefixes struct {
	mu        sync.Mutex
	capacity  int
	keyTokens int
	maxTokens int
	halfLife  float64 // seconds

	// Forward decay: a request at t adds 2^((t−landmark)/halfLife); comparing sums at one
	// instant compares decayed counts. The landmark moves before the weights overflow.
	landmark time.Time
	byKey    map[uint64]int // key → index in entries
	entries  []hotEntry
}

type hotEntry struct {
	key   uint64
	model string // the request's model: base model or adapter
	salt  string // cache_salt
	ids   []uint32
	// score over-estimates the decayed count by at most errScore, the score of the
	// entry this one evicted (Space-Saving); score − errScore is a guaranteed count.
	score, errScore float64
	hits            uint64 // requests counted since the entry took its slot
}

// hotPrompt is one prefix to replay.
type hotPrompt struct {
	model, salt string
	ids         []uint32
}

func newHotPrefixes(capacity, minMatchTokens, maxTokens int, halfLife time.Duration) *hotPrefixes {
	maxTokens = maxTokens / hotBlock * hotBlock
	keyTokens := (minMatchTokens + hotBlock - 1) / hotBlock * hotBlock
	keyTokens = min(max(keyTokens, hotBlock), maxTokens)
	return &hotPrefixes{
		capacity:  capacity,
		keyTokens: keyTokens,
		maxTokens: maxTokens,
		halfLife:  halfLife.Seconds(),
		byKey:     make(map[uint64]int, capacity),
		entries:   make([]hotEntry, 0, capacity),
	}
}

// weight is the forward-decay weight of a request at now; it rescales every score when
// the exponent grows large (rarely: once per ~500 half-lives).
func (h *hotPrefixes) weight(now time.Time) float64 {
	if h.landmark.IsZero() {
		h.landmark = now
	}
	exp := now.Sub(h.landmark).Seconds() / h.halfLife
	if exp > 500 {
		scale := math.Exp2(-exp)
		for i := range h.entries {
			h.entries[i].score *= scale
			h.entries[i].errScore *= scale
		}
		h.landmark, exp = now, 0
	}
	return math.Exp2(max(exp, 0))
}

// key identifies a prompt's prefix: the chain key of its first keyTokens tokens.
func (h *hotPrefixes) key(model, salt string, ids []uint32) uint64 {
	k := kvblock.Seed(model, "", salt)
	for i := 0; i < h.keyTokens; i += hotBlock {
		k = kvblock.Extend(k, ids[i:i+hotBlock])
	}
	return k
}

// record counts one successful request for model (or adapter) with cache_salt salt and
// prompt token ids. Prompts shorter than the identity key (MinMatchTokens rounded up to a
// block) are not tracked: they are not worth warming.
func (h *hotPrefixes) record(model, salt string, ids []uint32, now time.Time) {
	n := min(len(ids), h.maxTokens) / hotBlock * hotBlock
	if n < h.keyTokens {
		return
	}
	ids = ids[:n]
	key := h.key(model, salt, ids)
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.weight(now)
	if i, ok := h.byKey[key]; ok {
		e := &h.entries[i]
		if e.model != model || e.salt != salt {
			return // a key collision: count nothing rather than mix two prefixes
		}
		e.score += w
		e.hits++
		// Keep what every counted request shared, in whole blocks; the first keyTokens
		// are equal by the key.
		if c := sharedBlocks(e.ids, ids, h.keyTokens); c < len(e.ids) {
			e.ids = e.ids[:c]
		}
		return
	}
	j := len(h.entries)
	inherited := 0.0
	if j < h.capacity {
		h.entries = append(h.entries, hotEntry{})
	} else {
		// Space-Saving: take over the least-counted slot and inherit its count, so a
		// prefix that keeps coming gets in however full the table is.
		j = 0
		for i := 1; i < len(h.entries); i++ {
			if h.entries[i].score < h.entries[j].score {
				j = i
			}
		}
		delete(h.byKey, h.entries[j].key)
		inherited = h.entries[j].score
	}
	e := &h.entries[j]
	if e.model != model {
		e.model = strings.Clone(model)
	}
	if e.salt != salt {
		e.salt = strings.Clone(salt)
	}
	e.key = key
	e.ids = append(e.ids[:0], ids...)
	e.score, e.errScore, e.hits = inherited+w, inherited, 1
	h.byKey[key] = j
}

// sharedBlocks is the length, in whole blocks of hotBlock tokens, of the common prefix of
// a and b, both whole blocks long, knowing that their first from tokens are equal. It
// compares memory a kibibyte and then a block at a time (runtime memequal), several
// times faster than a token loop on long prompts.
func sharedBlocks(a, b []uint32, from int) int {
	n := min(len(a), len(b))
	ab, bb := u32bytes(a[:n]), u32bytes(b[:n])
	c := from * 4 // bytes known equal
	const chunk = 16 * hotBlock * 4
	for c+chunk <= len(ab) && bytes.Equal(ab[c:c+chunk], bb[c:c+chunk]) {
		c += chunk
	}
	const block = hotBlock * 4
	for c+block <= len(ab) && bytes.Equal(ab[c:c+block], bb[c:c+block]) {
		c += block
	}
	return c / 4
}

// u32bytes views ids as their bytes (no copy).
func u32bytes(ids []uint32) []byte {
	if len(ids) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&ids[0])), len(ids)*4)
}

// top returns copies of at most n prefixes, hottest (by guaranteed decayed count) first,
// among those seen at least hotMinHits times whose model ok accepts.
func (h *hotPrefixes) top(n int, ok func(model string) bool) []hotPrompt {
	h.mu.Lock()
	defer h.mu.Unlock()
	idx := make([]int, 0, len(h.entries))
	for i := range h.entries {
		if e := &h.entries[i]; e.hits >= hotMinHits && ok(e.model) {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		x, y := &h.entries[a], &h.entries[b]
		gx, gy := x.score-x.errScore, y.score-y.errScore
		switch {
		case gx > gy:
			return -1
		case gx < gy:
			return 1
		}
		return len(y.ids) - len(x.ids)
	})
	out := make([]hotPrompt, 0, min(n, len(idx)))
	for _, i := range idx[:min(n, len(idx))] {
		e := &h.entries[i]
		out = append(out, hotPrompt{model: e.model, salt: e.salt, ids: slices.Clone(e.ids)})
	}
	return out
}

// replayable counts the tracked prefixes seen at least hotMinHits times (for Stats).
func (h *hotPrefixes) replayable() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for i := range h.entries {
		if h.entries[i].hits >= hotMinHits {
			n++
		}
	}
	return n
}
