package tokenizer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// Token kinds, one byte per id in vocabulary.kind.
const (
	tokAbsent byte = iota // no token has this id
	tokBytes              // a byte-level token: the arena holds its raw bytes
	tokText               // not byte-level text (unreachable when encoding): the arena holds the text itself
)

// vocabulary is a BPE vocabulary laid out flat: the tokens' bytes back to back in
// id order, one little-endian uint32 offset per id, one kind byte per id. It holds
// no pointers per token, so the garbage collector never scans it (the maps it
// replaces held ~300k strings the collector walked every cycle), and the embedded
// model's vocabulary is these three slices of the embedded blob, not a copy.
type vocabulary struct {
	kind  []byte
	off   []byte // (len(kind)+1) little-endian uint32s: id's bytes are arena[off[id]:off[id+1]]
	arena []byte
	index *vocabIndex // raw bytes → id of tokBytes tokens; nil when nothing looks tokens up
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// token returns id's bytes and kind (tokAbsent for an unknown id).
func (v *vocabulary) token(id uint32) ([]byte, byte) {
	if uint64(id) >= uint64(len(v.kind)) || v.kind[id] == tokAbsent {
		return nil, tokAbsent
	}
	o := v.off[4*uint64(id):]
	start, end := le32(o), le32(o[4:])
	return v.arena[start:end:end], v.kind[id]
}

// check validates the layout (offsets in order and inside the arena, known kinds),
// so a corrupt compact blob is an error, not a panic later.
func (v *vocabulary) check() error {
	n := len(v.kind)
	if len(v.off) != 4*(n+1) {
		return fmt.Errorf("vocabulary: %d offsets for %d ids", len(v.off)/4, n)
	}
	prev := uint32(0)
	for id := 0; id <= n; id++ {
		o := le32(v.off[4*id:])
		if o < prev || int64(o) > int64(len(v.arena)) {
			return fmt.Errorf("vocabulary: offset of id %d out of order or range", id)
		}
		prev = o
	}
	if le32(v.off[4*n:]) != uint32(len(v.arena)) {
		return fmt.Errorf("vocabulary: arena has %d bytes, offsets end at %d", len(v.arena), le32(v.off[4*n:]))
	}
	for id, k := range v.kind {
		if k > tokText {
			return fmt.Errorf("vocabulary: id %d has unknown kind %d", id, k)
		}
	}
	return nil
}

// lookup returns the id of the byte-level token whose raw bytes are w.
func (v *vocabulary) lookup(w []byte) (uint32, bool) {
	return v.index.find(v.arena, maphash.Bytes(v.index.seed, w), w)
}

// lookupString is lookup for a string (no copy).
func (v *vocabulary) lookupString(w string) (uint32, bool) {
	return v.index.find(v.arena, maphash.String(v.index.seed, w), unsafe.Slice(unsafe.StringData(w), len(w)))
}

// buildIndex indexes every tokBytes token by its raw bytes.
func (v *vocabulary) buildIndex() {
	n := 0
	for _, k := range v.kind {
		if k == tokBytes {
			n++
		}
	}
	x := newVocabIndex(n)
	for id, k := range v.kind {
		if k != tokBytes {
			continue
		}
		o := v.off[4*id:]
		start, end := le32(o), le32(o[4:])
		x.place(maphash.Bytes(x.seed, v.arena[start:end]), uint32(id), start, end)
	}
	v.index = x
}

// vocabIndex is an open-addressing hash table (linear probing, load ≤ ½) of ids
// keyed by their tokens' bytes, which live in an arena, not in the table. A slot
// holds the key's hash's high 32 bits with id+1 (0: empty) and the key's span in
// the arena, so a probe touches the arena only when the hashes agree, and then
// only there (not the vocabulary's kind and offset arrays).
type vocabIndex struct {
	seed  maphash.Seed
	mask  uint64
	slots []indexSlot
	used  int
}

type indexSlot struct {
	key  uint64 // hash>>32<<32 | id+1
	span uint64 // start<<32 | end in the arena
}

func newVocabIndex(n int) *vocabIndex {
	size := 1 << bits.Len(uint(2*n))
	return &vocabIndex{seed: maphash.MakeSeed(), mask: uint64(size - 1), slots: make([]indexSlot, size)}
}

func (x *vocabIndex) find(arena []byte, h uint64, w []byte) (uint32, bool) {
	tag := h >> 32 << 32
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := &x.slots[i]
		if s.key == 0 {
			return 0, false
		}
		if s.key&^0xFFFFFFFF == tag && bytes.Equal(arena[s.span>>32:uint32(s.span)], w) {
			return uint32(s.key) - 1, true
		}
	}
}

// place stores id under hash h in the first free slot (the key is not present).
func (x *vocabIndex) place(h uint64, id, start, end uint32) {
	i := h & x.mask
	for x.slots[i].key != 0 {
		i = (i + 1) & x.mask
	}
	x.slots[i] = indexSlot{key: h>>32<<32 | uint64(id+1), span: uint64(start)<<32 | uint64(end)}
	x.used++
}

// vocabBuilder assembles a vocabulary from (text, id) entries in document order,
// with the semantics of decoding tokenizer.json's vocab object into a Go map: a
// text given twice keeps its last id (the earlier entry disappears).
type vocabBuilder struct {
	arena   []byte // entries' bytes in arrival order
	entries []vocabEntry
	index   *vocabIndex    // tokBytes entries by raw bytes; while building, slots hold entry numbers
	text    map[string]int // tokText entries by text → entry number
	dropped int
	err     error // a vocabulary problem, reported by parseBPE where the old loader reported them
}

type vocabEntry struct {
	id         uint32
	start, end uint32 // in the builder's arena
	kind       byte
	dropped    bool
}

// maxVocabGap bounds how far ids may run past the number of tokens: the layout
// is indexed by id, so ids must be (nearly) dense, as every tokenizer.json has them.
const maxVocabGap = 1 << 20

// newVocabBuilder sizes the builder for about n entries of arenaBytes bytes.
func newVocabBuilder(n, arenaBytes int) *vocabBuilder {
	return &vocabBuilder{
		arena:   make([]byte, 0, arenaBytes),
		entries: make([]vocabEntry, 0, n),
		index:   newVocabIndex(n),
	}
}

func (b *vocabBuilder) add(text []byte, id uint32) {
	start := len(b.arena)
	kind := tokBytes
	var ok bool
	if b.arena, ok = byteLevelDecodeBytes(b.arena, text); !ok {
		b.arena = append(b.arena[:start], text...)
		kind = tokText
	}
	e := len(b.entries)
	b.entries = append(b.entries, vocabEntry{id: id, start: uint32(start), end: uint32(len(b.arena)), kind: kind})
	if kind == tokText {
		if b.text == nil {
			b.text = make(map[string]int)
		}
		if prev, dup := b.text[string(text)]; dup {
			b.drop(prev)
		}
		b.text[string(text)] = e
		return
	}
	if 2*(b.index.used+1) > len(b.index.slots) {
		b.grow()
	}
	x := b.index
	k := b.arena[start:]
	h := maphash.Bytes(x.seed, k)
	slot := indexSlot{key: h>>32<<32 | uint64(e+1), span: uint64(start)<<32 | uint64(len(b.arena))}
	if prev, dup := x.find(b.arena, h, k); dup {
		b.drop(int(prev))
		for i := h & x.mask; ; i = (i + 1) & x.mask {
			if s := &x.slots[i]; uint32(s.key) == prev+1 {
				*s = slot
				return
			}
		}
	}
	x.place(h, uint32(e), uint32(start), uint32(len(b.arena)))
}

func (b *vocabBuilder) grow() {
	old := b.index
	x := newVocabIndex(len(old.slots))
	for _, s := range old.slots {
		if s.key != 0 {
			k := b.arena[s.span>>32 : uint32(s.span)]
			x.place(maphash.Bytes(x.seed, k), uint32(s.key)-1, uint32(s.span>>32), uint32(s.span))
		}
	}
	b.index = x
}

// drop forgets an entry whose text came again.
func (b *vocabBuilder) drop(e int) {
	b.entries[e].dropped = true
	b.dropped++
}

// finish lays the vocabulary out in id order and indexes it by id. A duplicated
// id or ids far beyond the token count are b.err (the vocabulary is then empty).
func (b *vocabBuilder) finish() *vocabulary {
	maxID, last := int64(-1), int64(-1)
	inOrder := b.dropped == 0 // then the arena already is in id order
	for _, e := range b.entries {
		if e.dropped {
			continue
		}
		if int64(e.id) <= last {
			inOrder = false
		}
		last = int64(e.id)
		maxID = max(maxID, int64(e.id))
	}
	live := len(b.entries) - b.dropped
	empty := &vocabulary{off: make([]byte, 4)}
	if maxID >= int64(live)+maxVocabGap {
		b.err = fmt.Errorf("model BPE vocab: id %d with only %d tokens (ids this sparse are not supported)", maxID, live)
		empty.buildIndex()
		return empty
	}
	n := int(maxID + 1)
	byID := make([]uint32, n) // entry number + 1
	for i, e := range b.entries {
		if e.dropped {
			continue
		}
		if prev := byID[e.id]; prev != 0 {
			p := b.entries[prev-1]
			b.err = fmt.Errorf("model BPE vocab: id %d is given to both %q and %q", e.id, b.arena[p.start:p.end], b.arena[e.start:e.end])
			empty.buildIndex()
			return empty
		}
		byID[e.id] = uint32(i + 1)
	}
	v := &vocabulary{kind: make([]byte, n), off: make([]byte, 4*(n+1)), arena: b.arena}
	if !inOrder {
		v.arena = make([]byte, 0, len(b.arena))
	}
	pos := uint32(0)
	for id, en := range byID {
		binary.LittleEndian.PutUint32(v.off[4*id:], pos)
		if en == 0 {
			continue
		}
		e := b.entries[en-1]
		v.kind[id] = e.kind
		if !inOrder {
			v.arena = append(v.arena, b.arena[e.start:e.end]...)
		}
		pos += e.end - e.start
	}
	binary.LittleEndian.PutUint32(v.off[4*n:], pos)
	v.arena = v.arena[:pos:pos]
	v.buildIndex()
	return v
}

// resolver finishes the vocabulary and returns a resolver for merges over it.
func (b *vocabBuilder) resolver() *mergeResolver {
	v := b.finish()
	r := &mergeResolver{v: v, out: make([]byte, 0, 12*len(v.kind))}
	for t, e := range b.text {
		if b.err == nil {
			if r.text == nil {
				r.text = make(map[string]uint32, len(b.text))
			}
			r.text[t] = b.entries[e].id
		}
	}
	return r
}

// mergeResolver turns merge rules given as token texts into id triples
// (left, right, merged; little-endian uint32s, in rank order), as the old loader
// did by looking the texts up in the vocab map.
type mergeResolver struct {
	v       *vocabulary
	text    map[string]uint32
	out     []byte
	err     error // first unresolvable rule
	scratch []byte
	next    uint32 // the id after the last merged token: trainers number merged tokens in rank order
}

func (r *mergeResolver) id(text []byte) (uint32, bool) {
	var ok bool
	if r.scratch, ok = byteLevelDecodeBytes(r.scratch[:0], text); ok {
		return r.v.lookup(r.scratch)
	}
	id, ok := r.text[string(text)]
	return id, ok
}

func (r *mergeResolver) add(rank int, left, right []byte) {
	if r.err != nil {
		return
	}
	lid, lok := r.id(left)
	rid, rok := r.id(right)
	var nid uint32
	var nok bool
	if lok && rok {
		// The merged text is byte-level exactly when both halves are.
		var ok1, ok2 bool
		r.scratch, ok1 = byteLevelDecodeBytes(r.scratch[:0], left)
		r.scratch, ok2 = byteLevelDecodeBytes(r.scratch, right)
		if ok1 && ok2 {
			// Try the id after the previous rule's token first: a hit is exact
			// (byte-level tokens have distinct bytes) and skips a hash lookup.
			if t, k := r.v.token(r.next); k == tokBytes && bytes.Equal(t, r.scratch) {
				nid, nok = r.next, true
			} else {
				nid, nok = r.v.lookup(r.scratch)
			}
		} else {
			nid, nok = r.text[string(left)+string(right)]
		}
	}
	if !lok || !rok || !nok {
		r.err = fmt.Errorf("model BPE merge %d (%q %q): token not in vocab", rank, left, right)
		return
	}
	r.out = binary.LittleEndian.AppendUint32(r.out, lid)
	r.out = binary.LittleEndian.AppendUint32(r.out, rid)
	r.out = binary.LittleEndian.AppendUint32(r.out, nid)
	r.next = nid + 1
}
