package sim

import (
	"encoding/binary"
	"math"
)

// Event types as vLLM names them on the wire.
const (
	evStored  = "BlockStored"
	evRemoved = "BlockRemoved"
	evCleared = "AllBlocksCleared"
)

const (
	mediumGPU      = "GPU"
	specFullAttn   = "full_attention"
	kindStored     = 1
	kindRemoved    = 2
	kindAllCleared = 3
	endOfReplaySeq = math.MaxUint64
)

// event is one KV event of a step. Hashes and tokens live in the owning eventBuf's
// arenas (offsets, so that growing an arena never invalidates an event).
type event struct {
	kind      uint8
	hashOff   int
	hashN     int
	tokOff    int
	tokN      int
	parent    uint64
	hasParent bool
	lora      string
	// salt is the cache_salt, set only when the event's first block is the request's
	// first block (vLLM puts cache_salt in the first block's extra keys only).
	salt string
}

// eventBuf collects the events of one scheduler step. It is reused step after step.
type eventBuf struct {
	evs    []event
	hashes []uint64
	tokens []uint32
}

func (b *eventBuf) reset() {
	b.evs, b.hashes, b.tokens = b.evs[:0], b.hashes[:0], b.tokens[:0]
}

func (b *eventBuf) empty() bool { return len(b.evs) == 0 }

// stored opens a BlockStored event; add its blocks with storedBlock.
func (b *eventBuf) stored(parent uint64, hasParent bool, lora, salt string) {
	b.evs = append(b.evs, event{kind: kindStored, hashOff: len(b.hashes), tokOff: len(b.tokens),
		parent: parent, hasParent: hasParent, lora: lora, salt: salt})
}

// storedBlock adds one block to the open BlockStored event.
func (b *eventBuf) storedBlock(hash uint64, tokens []uint32) {
	e := &b.evs[len(b.evs)-1]
	b.hashes = append(b.hashes, hash)
	b.tokens = append(b.tokens, tokens...)
	e.hashN++
	e.tokN += len(tokens)
}

func (b *eventBuf) removed(hash uint64) {
	b.evs = append(b.evs, event{kind: kindRemoved, hashOff: len(b.hashes), hashN: 1})
	b.hashes = append(b.hashes, hash)
}

func (b *eventBuf) cleared() {
	b.evs = append(b.evs, event{kind: kindAllCleared})
}

// encodeBatch appends the msgpack EventBatch [ts, events, dp_rank] to dst, in map form
// (vLLM ≥ v0.24) or legacy array form, with msgspec's encoding choices (smallest
// integer widths, float64 timestamp). See the package's golden-vector tests.
func encodeBatch(dst []byte, ts float64, b *eventBuf, arrayForm bool, blockSize, dpRank int) []byte {
	dst = mpArray(dst, 3)
	dst = mpFloat(dst, ts)
	dst = mpArray(dst, len(b.evs))
	for i := range b.evs {
		e := &b.evs[i]
		hashes := b.hashes[e.hashOff : e.hashOff+e.hashN]
		switch e.kind {
		case kindStored:
			tokens := b.tokens[e.tokOff : e.tokOff+e.tokN]
			dst = eventHead(dst, arrayForm, 11, evStored)
			dst = mpUints(dst, hashes)
			dst = field(dst, arrayForm, "parent_block_hash")
			if e.hasParent {
				dst = mpUint(dst, e.parent)
			} else {
				dst = mpNil(dst)
			}
			dst = field(dst, arrayForm, "token_ids")
			dst = mpArray(dst, len(tokens))
			for _, t := range tokens {
				dst = mpUint(dst, uint64(t))
			}
			dst = field(dst, arrayForm, "block_size")
			dst = mpUint(dst, uint64(blockSize))
			dst = field(dst, arrayForm, "lora_id")
			dst = mpNil(dst)
			dst = field(dst, arrayForm, "medium")
			dst = mpStr(dst, mediumGPU)
			dst = field(dst, arrayForm, "lora_name")
			if e.lora != "" {
				dst = mpStr(dst, e.lora)
			} else {
				dst = mpNil(dst)
			}
			dst = field(dst, arrayForm, "extra_keys")
			dst = mpArray(dst, len(hashes))
			for j := range hashes {
				dst = appendExtraKeys(dst, e.lora, e.salt, j == 0)
			}
			dst = field(dst, arrayForm, "group_idx")
			dst = mpUint(dst, 0)
			dst = field(dst, arrayForm, "kv_cache_spec_kind")
			dst = mpStr(dst, specFullAttn)
		case kindRemoved:
			dst = eventHead(dst, arrayForm, 4, evRemoved)
			dst = mpUints(dst, hashes)
			dst = field(dst, arrayForm, "medium")
			dst = mpStr(dst, mediumGPU)
			dst = field(dst, arrayForm, "group_idx")
			dst = mpUint(dst, 0)
		case kindAllCleared:
			if arrayForm {
				dst = mpArray(dst, 1)
			} else {
				dst = mpMap(dst, 1)
				dst = mpStr(dst, "type")
			}
			dst = mpStr(dst, evCleared)
		}
	}
	return mpUint(dst, uint64(dpRank))
}

// appendExtraKeys writes one block's extra keys as vLLM's generate_block_hash_extra_keys
// orders them: the LoRA name (every block of an adapter's request), then the cache salt
// (first block only); nil when there is neither.
func appendExtraKeys(dst []byte, lora, salt string, first bool) []byte {
	keys := extraKeys(lora, salt, first)
	if keys.n == 0 {
		return mpNil(dst)
	}
	dst = mpArray(dst, keys.n)
	for _, k := range keys.items[:keys.n] {
		dst = mpStr(dst, k)
	}
	return dst
}

// blockExtra holds a block's extra hash keys without allocating.
type blockExtra struct {
	items [2]string
	n     int
}

func (x *blockExtra) slice() []string { return x.items[:x.n] }

func extraKeys(lora, salt string, first bool) blockExtra {
	var x blockExtra
	if lora != "" {
		x.items[x.n] = lora
		x.n++
	}
	if first && salt != "" {
		x.items[x.n] = salt
		x.n++
	}
	return x
}

// eventHead opens an event of n fields of type typ: a positional array led by the type
// name, or a map with "type" and the key of the first field, "block_hashes".
func eventHead(dst []byte, arrayForm bool, n int, typ string) []byte {
	if arrayForm {
		return mpStr(mpArray(dst, n), typ)
	}
	return mpStr(mpStr(mpStr(mpMap(dst, n), "type"), typ), "block_hashes")
}

func field(dst []byte, arrayForm bool, name string) []byte {
	if arrayForm {
		return dst
	}
	return mpStr(dst, name)
}

// seqFrame is the 8-byte big-endian sequence number frame.
func seqFrame(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}

// msgpack encoding, smallest forms first (as msgspec writes them).

func mpNil(b []byte) []byte { return append(b, 0xc0) }

func mpFloat(b []byte, f float64) []byte {
	v := math.Float64bits(f)
	return append(b, 0xcb, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(b, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(b, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

func mpUints(b []byte, vs []uint64) []byte {
	b = mpArray(b, len(vs))
	for _, v := range vs {
		b = mpUint(b, v)
	}
	return b
}

func mpStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

func mpArray(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	default:
		return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func mpMap(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xde, byte(n>>8), byte(n))
	default:
		return append(b, 0xdf, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}
