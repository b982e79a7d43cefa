package openai

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// The intern table remembers recently decoded long JSON strings by their raw
// (still escaped) bytes. A router sees the same long system prompt or document in
// request after request; finding it here skips validating, unescaping and copying
// tens of kilobytes, and hands every request the same string, so the tokenizer's
// caches compare it by pointer. A hit needs byte-for-byte equal raw text, so the
// result is exactly what decoding would give. It is process-wide (ParseChat is a
// plain function), bounded, and safe for concurrent use.
const (
	internMinBytes   = 4 << 10  // shorter strings are cheap to decode
	internMaxBytes   = 1 << 20  // longer ones would crowd the table out
	internMaxEntries = 64       // distinct long prompts kept
	internMaxTotal   = 32 << 20 // raw + decoded bytes kept, at most
)

type internEntry struct {
	raw  []byte
	str  string
	key  uint64
	used uint64 // clock of the last hit, for eviction
}

// The table is keyed by a hash of the first internKeyBytes raw bytes, so a lookup
// needs no search for the closing quote: each entry with that prefix is compared
// in full and must be followed by the closing quote in the body. A stored raw text
// never ends inside an escape (it was a whole string), so that quote really
// closes the string.
const internKeyBytes = 512

type internTable struct {
	mu       sync.Mutex
	seed     maphash.Seed
	byPrefix map[uint64][]*internEntry
	n        int
	total    int
	clock    uint64
}

var interned = internTable{seed: maphash.MakeSeed(), byPrefix: make(map[uint64][]*internEntry)}

func (t *internTable) key(rest []byte) (uint64, bool) {
	if len(rest) < internMinBytes {
		return 0, false
	}
	return maphash.Bytes(t.seed, rest[:internKeyBytes]), true
}

// lookup finds a remembered string whose raw text starts rest (the body just
// after an opening quote) and is followed by the closing quote. It returns the
// string and the raw length.
func (t *internTable) lookup(rest []byte) (string, int, bool) {
	k, ok := t.key(rest)
	if !ok {
		return "", 0, false
	}
	t.mu.Lock()
	cands := t.byPrefix[k]
	var hit *internEntry
	for _, e := range cands {
		if len(e.raw) < len(rest) && rest[len(e.raw)] == '"' && bytes.Equal(e.raw, rest[:len(e.raw)]) {
			hit = e
			break
		}
	}
	if hit != nil {
		t.clock++
		hit.used = t.clock
	}
	t.mu.Unlock()
	if hit == nil {
		return "", 0, false
	}
	return hit.str, len(hit.raw), true
}

// put remembers the decoded str of a whole raw string text.
func (t *internTable) put(raw []byte, str string) {
	if len(raw) < internMinBytes || len(raw) > internMaxBytes {
		return
	}
	k, _ := t.key(raw)
	e := &internEntry{raw: bytes.Clone(raw), str: str, key: k}
	size := len(raw) + len(str)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, old := range t.byPrefix[k] {
		if bytes.Equal(old.raw, raw) {
			return
		}
	}
	for t.n >= internMaxEntries || (t.total+size > internMaxTotal && t.n > 0) {
		t.evictOldest()
	}
	t.clock++
	e.used = t.clock
	t.byPrefix[k] = append(t.byPrefix[k], e)
	t.n++
	t.total += size
}

func (t *internTable) evictOldest() {
	var oldest *internEntry
	for _, es := range t.byPrefix {
		for _, e := range es {
			if oldest == nil || e.used < oldest.used {
				oldest = e
			}
		}
	}
	es := t.byPrefix[oldest.key]
	for i, e := range es {
		if e == oldest {
			es = append(es[:i], es[i+1:]...)
			break
		}
	}
	if len(es) == 0 {
		delete(t.byPrefix, oldest.key)
	} else {
		t.byPrefix[oldest.key] = es
	}
	t.n--
	t.total -= len(oldest.raw) + len(oldest.str)
}
