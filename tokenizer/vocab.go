package tokenizer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
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
	x := v.index
	h := maphash.Bytes(x.seed, w)
	tag := h >> 32 << 32
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return 0, false
		}
		if s&^0xFFFFFFFF == tag {
			if t, _ := v.token(uint32(s) - 1); bytes.Equal(t, w) {
				return uint32(s) - 1, true
			}
		}
	}
}

// lookupString is lookup for a string (no copy).
func (v *vocabulary) lookupString(w string) (uint32, bool) {
	x := v.index
	h := maphash.String(x.seed, w)
	tag := h >> 32 << 32
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return 0, false
		}
		if s&^0xFFFFFFFF == tag {
			if t, _ := v.token(uint32(s) - 1); string(t) == w {
				return uint32(s) - 1, true
			}
		}
	}
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
		t, _ := v.token(uint32(id))
		x.place(maphash.Bytes(x.seed, t), uint32(id))
	}
	v.index = x
}

// vocabIndex is an open-addressing hash table (linear probing, load ≤ ½) of ids
// keyed by their tokens' bytes, which live in the vocabulary, not in the table.
// A slot holds the key's hash's high 32 bits and id+1 (0: empty), so a probe
// compares token bytes only when the hashes agree.
type vocabIndex struct {
	seed  maphash.Seed
	mask  uint64
	slots []uint64
	used  int
}

func newVocabIndex(n int) *vocabIndex {
	size := 1 << bits.Len(uint(2*n))
	return &vocabIndex{seed: maphash.MakeSeed(), mask: uint64(size - 1), slots: make([]uint64, size)}
}

// place stores id under hash h in the first free slot (the key is not present).
func (x *vocabIndex) place(h uint64, id uint32) {
	i := h & x.mask
	for x.slots[i] != 0 {
		i = (i + 1) & x.mask
	}
	x.slots[i] = h>>32<<32 | uint64(id+1)
	x.used++
}

// vocabBuilder assembles a vocabulary from (text, id) entries in document order,
// with the semantics of decoding tokenizer.json's vocab object into a Go map: a
// text given twice keeps its last id (the earlier id disappears).
type vocabBuilder struct {
	arena   []byte   // entries' bytes in arrival order
	spans   []uint64 // per id: start<<32 | end in arena
	kind    []byte
	index   *vocabIndex
	text    map[string]uint32 // tokText entries by text
	inOrder bool              // ids arrived strictly increasing and nothing was dropped: arena is in id order
	lastID  int64
	err     error // first duplicate id (reported by parseBPE, where the old loader reported vocabulary problems)
}

// newVocabBuilder sizes the builder for about n entries of arenaBytes bytes.
func newVocabBuilder(n, arenaBytes int) *vocabBuilder {
	return &vocabBuilder{
		arena:   make([]byte, 0, arenaBytes),
		spans:   make([]uint64, 0, n),
		kind:    make([]byte, 0, n),
		index:   newVocabIndex(n),
		inOrder: true,
		lastID:  -1,
	}
}

func (b *vocabBuilder) key(id uint32) []byte {
	s := b.spans[id]
	return b.arena[s>>32 : uint32(s)]
}

func (b *vocabBuilder) add(text []byte, id uint32) {
	start := len(b.arena)
	kind := tokBytes
	var ok bool
	if b.arena, ok = byteLevelDecodeBytes(b.arena, text); !ok {
		b.arena = append(b.arena[:start], text...)
		kind = tokText
	}
	end := len(b.arena)
	if int64(id) <= b.lastID {
		b.inOrder = false
	}
	b.lastID = max(b.lastID, int64(id))
	if kind == tokBytes {
		b.insert(b.arena[start:end], id, start, end)
	} else {
		if b.text == nil {
			b.text = make(map[string]uint32)
		}
		if prev, dup := b.text[string(text)]; dup {
			b.drop(prev)
		}
		b.text[string(text)] = id
		b.set(id, kind, start, end)
	}
}

// insert indexes a tokBytes entry, replacing an earlier entry with the same bytes.
func (b *vocabBuilder) insert(k []byte, id uint32, start, end int) {
	if 2*(b.index.used+1) > len(b.index.slots) {
		b.grow()
	}
	x := b.index
	h := maphash.Bytes(x.seed, k)
	tag := h >> 32 << 32
	i := h & x.mask
	for ; x.slots[i] != 0; i = (i + 1) & x.mask {
		s := x.slots[i]
		prev := uint32(s) - 1
		if s&^0xFFFFFFFF == tag && b.kind[prev] == tokBytes && bytes.Equal(b.key(prev), k) {
			b.drop(prev)
			b.set(id, tokBytes, start, end)
			x.slots[i] = tag | uint64(id+1)
			return
		}
	}
	b.set(id, tokBytes, start, end)
	x.slots[i] = tag | uint64(id+1)
	x.used++
}

func (b *vocabBuilder) grow() {
	old := b.index
	x := newVocabIndex(len(old.slots))
	for _, s := range old.slots {
		if s != 0 {
			id := uint32(s) - 1
			x.place(maphash.Bytes(x.seed, b.key(id)), id)
		}
	}
	b.index = x
}

// drop forgets an entry whose text came again with another id.
func (b *vocabBuilder) drop(id uint32) {
	b.kind[id] = tokAbsent
	b.spans[id] = 0
	b.inOrder = false
}

func (b *vocabBuilder) set(id uint32, kind byte, start, end int) {
	for uint64(len(b.kind)) <= uint64(id) {
		b.kind = append(b.kind, tokAbsent)
		b.spans = append(b.spans, 0)
	}
	if b.kind[id] != tokAbsent && b.err == nil {
		b.err = fmt.Errorf("model BPE vocab: id %d is given to both %q and %q", id, b.key(id), b.arena[start:end])
	}
	b.kind[id] = kind
	b.spans[id] = uint64(start)<<32 | uint64(end)
}

// finish lays the vocabulary out in id order. The index stays valid: it holds ids.
func (b *vocabBuilder) finish() *vocabulary {
	n := len(b.kind)
	v := &vocabulary{kind: b.kind, off: make([]byte, 4*(n+1)), arena: b.arena, index: b.index}
	if !b.inOrder {
		v.arena = make([]byte, 0, len(b.arena))
	}
	pos := uint32(0)
	for id := range n {
		binary.LittleEndian.PutUint32(v.off[4*id:], pos)
		if b.kind[id] == tokAbsent {
			continue
		}
		s := b.spans[id]
		if !b.inOrder {
			v.arena = append(v.arena, b.arena[s>>32:uint32(s)]...)
		}
		pos += uint32(s) - uint32(s>>32)
	}
	binary.LittleEndian.PutUint32(v.off[4*n:], pos)
	if b.inOrder {
		v.arena = v.arena[:pos]
	}
	return v
}

// resolver finishes the vocabulary and returns a resolver for merges over it.
func (b *vocabBuilder) resolver() *mergeResolver {
	return &mergeResolver{v: b.finish(), text: b.text, out: make([]byte, 0, 12*len(b.kind))}
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
			nid, nok = r.v.lookup(r.scratch)
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
}
