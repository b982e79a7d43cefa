package openai

import (
	"bytes"
	"encoding/binary"
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
	used uint64 // clock of the last hit, for eviction
}

type internTable struct {
	mu    sync.Mutex
	seed  maphash.Seed
	byKey map[uint64]*internEntry
	total int
	clock uint64
}

var interned = internTable{seed: maphash.MakeSeed(), byKey: make(map[uint64]*internEntry)}

// key hashes a sample of raw — its length, its first and last 512 bytes and 32
// bytes of every 4 KiB between — since only equal raw bytes count as a hit (checked
// by bytes.Equal), a sample that collides just costs a miss.
func (t *internTable) key(raw []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(raw)))
	h.Write(n[:])
	const edge, stride, chunk = 512, 4 << 10, 32
	if len(raw) <= 2*edge {
		h.Write(raw)
		return h.Sum64()
	}
	h.Write(raw[:edge])
	for i := edge; i+chunk <= len(raw)-edge; i += stride {
		h.Write(raw[i : i+chunk])
	}
	h.Write(raw[len(raw)-edge:])
	return h.Sum64()
}

func (t *internTable) get(raw []byte) (string, bool) {
	h := t.key(raw)
	t.mu.Lock()
	e := t.byKey[h]
	if e != nil {
		t.clock++
		e.used = t.clock
	}
	t.mu.Unlock()
	if e == nil || !bytes.Equal(e.raw, raw) {
		return "", false
	}
	return e.str, true
}

func (t *internTable) put(raw []byte, str string) {
	h := t.key(raw)
	e := &internEntry{raw: bytes.Clone(raw), str: str}
	size := len(raw) + len(str)
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.byKey[h]; old != nil {
		t.total -= len(old.raw) + len(old.str)
	}
	for len(t.byKey) >= internMaxEntries || (t.total+size > internMaxTotal && len(t.byKey) > 0) {
		var victim uint64
		var oldest *internEntry
		for k, v := range t.byKey {
			if oldest == nil || v.used < oldest.used {
				victim, oldest = k, v
			}
		}
		delete(t.byKey, victim)
		t.total -= len(oldest.raw) + len(oldest.str)
	}
	t.clock++
	e.used = t.clock
	t.byKey[h] = e
	t.total += size
}
