package agent

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// EventKind is the type of one engine KV-cache event.
type EventKind uint8

// Event kinds. Unknown event types decode as KindUnknown and are skipped by the mirror.
const (
	KindUnknown EventKind = iota
	KindBlockStored
	KindBlockRemoved
	KindAllBlocksCleared
)

// String returns vLLM's name of the kind ("unknown" for KindUnknown).
func (k EventKind) String() string {
	switch k {
	case KindBlockStored:
		return "BlockStored"
	case KindBlockRemoved:
		return "BlockRemoved"
	case KindAllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Medium is the storage tier an event talks about.
type Medium uint8

// Media. An absent or nil medium means the GPU (vLLM's default).
const (
	MediumGPU Medium = iota
	MediumCPU
	MediumDisk
	MediumOther
)

// Event is one decoded engine event. Slices and strings are owned by the Decoder's
// Batch and are overwritten by the next Decode into the same Batch.
type Event struct {
	Kind EventKind
	// Hashes are the engine's block hashes, reduced to uint64 (signed values
	// reinterpreted, byte digests → last 8 bytes big-endian).
	Hashes []uint64
	// Parent is parent_block_hash; HasParent is false when it was nil or absent.
	Parent    uint64
	HasParent bool
	// Tokens are the concatenated token ids of the stored blocks.
	Tokens []uint32
	// BlockSize is the event's block_size (0 when absent).
	BlockSize int
	// LoRAName is lora_name ("" when nil or absent).
	LoRAName string
	Medium   Medium
	// Group is group_idx (0 when nil or absent).
	Group int
	// Salt is the cache_salt found in the first block's extra_keys ("" when none).
	Salt string
	// ExtraFrom is the index of the first block whose extra_keys hold anything but the
	// LoRA name (and, for block 0, one salt string): a multimodal block. -1 when none.
	ExtraFrom int

	extras []extraItem
}

// extraItem is one element of one block's extra_keys tuple, kept until the whole event
// is decoded (map events may name lora_name after extra_keys).
type extraItem struct {
	block int
	str   string
	isStr bool
}

// Batch is one decoded engine batch.
type Batch struct {
	// Time is the engine's batch timestamp in seconds since the Unix epoch.
	Time float64
	// Events holds the batch's events in order; its elements are reused across Decode calls.
	Events []Event
	// DPRank is data_parallel_rank; HasDPRank is false when it was nil or absent.
	DPRank    int
	HasDPRank bool
}

func (b *Batch) reset() {
	b.Time = 0
	b.Events = b.Events[:0]
	b.DPRank = 0
	b.HasDPRank = false
}

// nextEvent returns a reset event slot at the end of b.Events, reusing its slices.
func (b *Batch) nextEvent() *Event {
	if len(b.Events) < cap(b.Events) {
		b.Events = b.Events[:len(b.Events)+1]
	} else {
		b.Events = append(b.Events, Event{})
	}
	e := &b.Events[len(b.Events)-1]
	*e = Event{Hashes: e.Hashes[:0], Tokens: e.Tokens[:0], extras: e.extras[:0], ExtraFrom: -1}
	return e
}

// maxInterned bounds the decoder's string table (LoRA names, salts, media names).
const maxInterned = 4096

// Decoder decodes vLLM KV-event payloads (msgpack) in every wire form the spec lists:
// a batch as an array of 2 or 3+ elements or as a map; events as maps keyed by field
// name or as positional arrays; hashes as integers of any width (signed ones
// reinterpreted as uint64) or as byte strings (last 8 bytes, big-endian). Unknown keys,
// positions and event types are skipped. A Decoder is not safe for concurrent use; it
// does not allocate in the steady state when decoding into a reused Batch.
type Decoder struct {
	r       bytes.Reader
	payload []byte
	dec     *msgpack.Decoder
	strs    map[string]string
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	d := &Decoder{strs: make(map[string]string)}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}

// Decode decodes payload into b (which it resets first). On error b holds a partial
// batch that must not be applied; the error wraps ErrDecode.
func (d *Decoder) Decode(payload []byte, b *Batch) error {
	b.reset()
	d.payload = payload
	d.r.Reset(payload)
	d.dec.ResetReader(&d.r)
	if err := d.batch(b); err != nil {
		return fmt.Errorf("%w: %v", ErrDecode, err)
	}
	if d.r.Len() != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrDecode, d.r.Len())
	}
	return nil
}

func (d *Decoder) batch(b *Batch) error {
	c, err := d.peekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		n, err := d.mapLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			key, err := d.readStr()
			if err != nil {
				return err
			}
			switch string(key) {
			case "ts":
				if b.Time, err = d.float(); err != nil {
					return err
				}
			case "events":
				if err := d.events(b); err != nil {
					return err
				}
			case "data_parallel_rank":
				if err := d.rank(b); err != nil {
					return err
				}
			default:
				if err := d.skip(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	if n < 2 {
		return fmt.Errorf("batch array of %d elements, want 2 or 3", n)
	}
	if b.Time, err = d.float(); err != nil {
		return err
	}
	if err := d.events(b); err != nil {
		return err
	}
	if n >= 3 {
		if err := d.rank(b); err != nil {
			return err
		}
	}
	for i := 3; i < n; i++ {
		if err := d.skip(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) rank(b *Batch) error {
	isNil, err := d.nilNext()
	if err != nil || isNil {
		return err
	}
	v, err := d.dec.DecodeInt64()
	if err != nil {
		return err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return fmt.Errorf("data_parallel_rank %d out of range", v)
	}
	b.DPRank, b.HasDPRank = int(v), true
	return nil
}

func (d *Decoder) float() (float64, error) {
	c, err := d.peekCode()
	if err != nil {
		return 0, err
	}
	switch {
	case c == msgpcode.Nil:
		return 0, d.dec.DecodeNil()
	case c == msgpcode.Float || c == msgpcode.Double:
		return d.dec.DecodeFloat64()
	default:
		v, err := d.dec.DecodeInt64()
		return float64(v), err
	}
}

func (d *Decoder) events(b *Batch) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		c, err := d.peekCode()
		if err != nil {
			return err
		}
		e := b.nextEvent()
		if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
			err = d.mapEvent(e)
		} else {
			err = d.arrayEvent(e)
		}
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		d.finishExtras(e)
	}
	return nil
}

func (d *Decoder) kind() (EventKind, error) {
	s, err := d.readStr()
	if err != nil {
		return KindUnknown, err
	}
	switch string(s) {
	case "BlockStored":
		return KindBlockStored, nil
	case "BlockRemoved":
		return KindBlockRemoved, nil
	case "AllBlocksCleared":
		return KindAllBlocksCleared, nil
	}
	return KindUnknown, nil
}

func (d *Decoder) mapEvent(e *Event) error {
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		key, err := d.readStr()
		if err != nil {
			return err
		}
		switch string(key) {
		case "type":
			e.Kind, err = d.kind()
		case "block_hashes":
			err = d.hashes(e)
		case "parent_block_hash":
			e.Parent, e.HasParent, err = d.hash()
		case "token_ids":
			err = d.tokens(e)
		case "block_size":
			e.BlockSize, err = d.smallInt()
		case "medium":
			e.Medium, err = d.medium()
		case "lora_name":
			e.LoRAName, err = d.optStr()
		case "extra_keys":
			err = d.extraKeys(e)
		case "group_idx":
			e.Group, err = d.smallInt()
		default:
			err = d.skip()
		}
		if err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
	}
	return nil
}

func (d *Decoder) arrayEvent(e *Event) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("empty event array")
	}
	if e.Kind, err = d.kind(); err != nil {
		return err
	}
	for pos := 1; pos < n; pos++ {
		switch e.Kind {
		case KindBlockStored:
			switch pos {
			case 1:
				err = d.hashes(e)
			case 2:
				e.Parent, e.HasParent, err = d.hash()
			case 3:
				err = d.tokens(e)
			case 4:
				e.BlockSize, err = d.smallInt()
			case 6:
				e.Medium, err = d.medium()
			case 7:
				e.LoRAName, err = d.optStr()
			case 8:
				err = d.extraKeys(e)
			case 9:
				e.Group, err = d.smallInt()
			default: // 5 lora_id, 10 spec kind, 11 sliding window, later additions
				err = d.skip()
			}
		case KindBlockRemoved:
			switch pos {
			case 1:
				err = d.hashes(e)
			case 2:
				e.Medium, err = d.medium()
			case 3:
				e.Group, err = d.smallInt()
			default:
				err = d.skip()
			}
		default:
			err = d.skip()
		}
		if err != nil {
			return fmt.Errorf("position %d: %w", pos, err)
		}
	}
	return nil
}

// nilNext consumes a nil if one is next.
func (d *Decoder) nilNext() (bool, error) {
	c, err := d.peekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		d.skipBytes(1)
		return true, nil
	}
	return false, nil
}

func (d *Decoder) hashes(e *Event) error {
	return intList(d, &e.Hashes, appendUints64, func() (uint64, error) {
		h, ok, err := d.hash()
		if err == nil && !ok {
			err = fmt.Errorf("nil block hash")
		}
		return h, err
	})
}

// intList reads a nil or an array of integers into *dst: runs that bulk can read are
// taken straight from the payload, anything else goes through one, value by value.
func intList[T uint32 | uint64](d *Decoder, dst *[]T, bulk func([]T, []byte, int) ([]T, int), one func() (T, error)) error {
	if isNil, err := d.nilNext(); err != nil || isNil {
		return err
	}
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; {
		got, used := bulk(*dst, d.payload[len(d.payload)-d.r.Len():], n-i)
		i += len(got) - len(*dst)
		*dst = got
		if used > 0 {
			d.skipBytes(used)
		}
		if i == n {
			break
		}
		v, err := one()
		if err != nil {
			return err
		}
		*dst = append(*dst, v)
		i++
	}
	return nil
}

// appendUints64 is appendUints32 for hashes: it also takes uint64 encodings.
func appendUints64(dst []uint64, p []byte, max int) (out []uint64, used int) {
	j := 0
	for k := 0; k < max && j < len(p); k++ {
		c := p[j]
		switch {
		case c <= 0x7f:
			dst = append(dst, uint64(c))
			j++
		case c == msgpcode.Uint64 && j+9 <= len(p):
			dst = append(dst, binary.BigEndian.Uint64(p[j+1:]))
			j += 9
		case c == msgpcode.Uint32 && j+5 <= len(p):
			dst = append(dst, uint64(binary.BigEndian.Uint32(p[j+1:])))
			j += 5
		case c == msgpcode.Uint16 && j+3 <= len(p):
			dst = append(dst, uint64(binary.BigEndian.Uint16(p[j+1:])))
			j += 3
		case c == msgpcode.Uint8 && j+2 <= len(p):
			dst = append(dst, uint64(p[j+1]))
			j += 2
		default:
			return dst, j
		}
	}
	return dst, j
}

// hash reads an engine hash: nil (ok=false), an integer of any width (signed values
// reinterpreted as uint64), or a byte/str digest (its last 8 bytes, big-endian).
func (d *Decoder) hash() (uint64, bool, error) {
	c, err := d.peekCode()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c == msgpcode.Nil:
		return 0, false, d.dec.DecodeNil()
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		b, err := d.readBytes()
		if err != nil {
			return 0, false, err
		}
		if len(b) > 8 {
			b = b[len(b)-8:]
		}
		var full [8]byte
		copy(full[8-len(b):], b)
		return binary.BigEndian.Uint64(full[:]), true, nil
	case msgpcode.IsFixedNum(c) || c >= msgpcode.Uint8 && c <= msgpcode.Int64:
		if v, ok := d.fastUint(); ok {
			return v, true, nil
		}
		v, err := d.dec.DecodeUint64()
		return v, true, err
	}
	return 0, false, fmt.Errorf("block hash of msgpack type 0x%02x", c)
}

func (d *Decoder) tokens(e *Event) error {
	// Anything the bulk path does not take (signed encodings, uint64, garbage) is read
	// one value at a time and range-checked.
	return intList(d, &e.Tokens, appendUints32, func() (uint32, error) {
		iv, err := d.dec.DecodeInt64()
		if err != nil {
			return 0, err
		}
		if iv < 0 || iv > math.MaxUint32 {
			return 0, fmt.Errorf("token id %d out of range", iv)
		}
		return uint32(iv), nil
	})
}

// appendUints32 appends up to max msgpack integers encoded as positive fixint, uint8,
// uint16 or uint32 from p to dst, stopping at the first other code; used is the number
// of bytes consumed.
func appendUints32(dst []uint32, p []byte, max int) (out []uint32, used int) {
	j := 0
	for k := 0; k < max && j < len(p); k++ {
		c := p[j]
		switch {
		case c <= 0x7f:
			dst = append(dst, uint32(c))
			j++
		case c == msgpcode.Uint8 && j+2 <= len(p):
			dst = append(dst, uint32(p[j+1]))
			j += 2
		case c == msgpcode.Uint16 && j+3 <= len(p):
			dst = append(dst, uint32(binary.BigEndian.Uint16(p[j+1:])))
			j += 3
		case c == msgpcode.Uint32 && j+5 <= len(p):
			dst = append(dst, binary.BigEndian.Uint32(p[j+1:]))
			j += 5
		default:
			return dst, j
		}
	}
	return dst, j
}

// skipBytes advances the reader over n bytes already parsed from the payload.
func (d *Decoder) skipBytes(n int) {
	_, _ = d.r.Seek(int64(len(d.payload)-d.r.Len()+n), io.SeekStart)
}

// fastUint reads a non-negative msgpack integer straight from the payload slice (the
// hot path of token ids and hashes); ok is false, with nothing consumed, for any other
// code, which the caller then hands to the msgpack Decoder.
func (d *Decoder) fastUint() (uint64, bool) {
	pos := len(d.payload) - d.r.Len()
	p := d.payload[pos:]
	if len(p) == 0 {
		return 0, false
	}
	var v uint64
	n := 1
	switch c := p[0]; {
	case c <= 0x7f:
		v = uint64(c)
	case c == msgpcode.Uint8 && len(p) >= 2:
		v, n = uint64(p[1]), 2
	case c == msgpcode.Uint16 && len(p) >= 3:
		v, n = uint64(binary.BigEndian.Uint16(p[1:])), 3
	case c == msgpcode.Uint32 && len(p) >= 5:
		v, n = uint64(binary.BigEndian.Uint32(p[1:])), 5
	case c == msgpcode.Uint64 && len(p) >= 9:
		v, n = binary.BigEndian.Uint64(p[1:]), 9
	default:
		return 0, false
	}
	_, _ = d.r.Seek(int64(pos+n), io.SeekStart)
	return v, true
}

// smallInt reads an int or nil (0) that must fit in an int32.
func (d *Decoder) smallInt() (int, error) {
	if isNil, err := d.nilNext(); err != nil || isNil {
		return 0, err
	}
	if u, ok := d.fastUint(); ok {
		if u > math.MaxInt32 {
			return 0, fmt.Errorf("integer %d out of range", u)
		}
		return int(u), nil
	}
	v, err := d.dec.DecodeInt64()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("integer %d out of range", v)
	}
	return int(v), nil
}

func (d *Decoder) medium() (Medium, error) {
	if isNil, err := d.nilNext(); err != nil || isNil {
		return MediumGPU, err
	}
	s, err := d.readStr()
	if err != nil {
		return MediumOther, err
	}
	switch string(s) {
	case "GPU", "gpu", "cuda", "CUDA", "":
		return MediumGPU, nil
	case "CPU", "cpu", "CPU_PINNED":
		return MediumCPU, nil
	case "STORAGE", "DISK", "disk":
		return MediumDisk, nil
	}
	return MediumOther, nil
}

// optStr reads a string or nil ("") and interns it.
func (d *Decoder) optStr() (string, error) {
	if isNil, err := d.nilNext(); err != nil || isNil {
		return "", err
	}
	s, err := d.readStr()
	if err != nil {
		return "", err
	}
	return d.intern(s), nil
}

// extraKeys reads extra_keys: nil, or one entry per block, each nil or a tuple whose
// items are strings (LoRA name, cache salt, multimodal hashes) or anything else
// (multimodal identifiers with offsets): anything that is not a string is kept as
// "not a string" only.
func (d *Decoder) extraKeys(e *Event) error {
	if isNil, err := d.nilNext(); err != nil || isNil {
		return err
	}
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	for blk := 0; blk < n; blk++ {
		isNil, err := d.nilNext()
		if err != nil {
			return err
		}
		if isNil {
			continue
		}
		c, err := d.peekCode()
		if err != nil {
			return err
		}
		if !(msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32) {
			// A bare value instead of a tuple: one item.
			if err := d.extraItem(e, blk); err != nil {
				return err
			}
			continue
		}
		m, err := d.arrayLen()
		if err != nil {
			return err
		}
		for j := 0; j < m; j++ {
			if err := d.extraItem(e, blk); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Decoder) extraItem(e *Event, blk int) error {
	c, err := d.peekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsString(c) {
		s, err := d.readStr()
		if err != nil {
			return err
		}
		e.extras = append(e.extras, extraItem{block: blk, str: d.intern(s), isStr: true})
		return nil
	}
	e.extras = append(e.extras, extraItem{block: blk})
	return d.skip()
}

// finishExtras applies vLLM's extra_keys layout now that lora_name is known: per block
// [lora_name (LoRA only)] + [multimodal ids] + [cache_salt (first block only)]. The LoRA
// name is stripped; a first block left with exactly one string holds the salt; any
// other remaining item marks a multimodal block.
func (d *Decoder) finishExtras(e *Event) {
	if len(e.extras) == 0 {
		return
	}
	block, count, strippedLoRA := -1, 0, false
	var last extraItem
	flush := func() {
		if block < 0 || count == 0 {
			return
		}
		if block == 0 && count == 1 && last.isStr {
			e.Salt = last.str
			return
		}
		if e.ExtraFrom < 0 || block < e.ExtraFrom {
			e.ExtraFrom = block
		}
	}
	for _, it := range e.extras {
		if it.block != block {
			flush()
			block, count, strippedLoRA = it.block, 0, false
		}
		if it.isStr && e.LoRAName != "" && !strippedLoRA && it.str == e.LoRAName {
			strippedLoRA = true
			continue
		}
		count++
		last = it
	}
	flush()
}

func (d *Decoder) intern(b []byte) string {
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	if len(d.strs) >= maxInterned {
		clear(d.strs)
	}
	s := string(b)
	d.strs[s] = s
	return s
}

// readStr reads a str or bin value (a slice of the payload, valid until the next Decode).
func (d *Decoder) readStr() ([]byte, error) {
	c, err := d.peekCode()
	if err != nil {
		return nil, err
	}
	if !(msgpcode.IsString(c) || msgpcode.IsBin(c)) {
		return nil, fmt.Errorf("want a string, got msgpack type 0x%02x", c)
	}
	return d.readBytes()
}

// readBytes reads a str or bin value (or nil: empty) and returns it as a slice of the
// payload, valid until the next Decode.
func (d *Decoder) readBytes() ([]byte, error) {
	pos := len(d.payload) - d.r.Len()
	p := d.payload[pos:]
	if len(p) == 0 {
		return nil, io.ErrUnexpectedEOF
	}
	var n, hdr int
	switch c := p[0]; {
	case c >= 0xa0 && c <= 0xbf: // fixstr
		n, hdr = int(c&0x1f), 1
	case c == msgpcode.Str8 || c == msgpcode.Bin8:
		if len(p) < 2 {
			return nil, io.ErrUnexpectedEOF
		}
		n, hdr = int(p[1]), 2
	case c == msgpcode.Str16 || c == msgpcode.Bin16:
		if len(p) < 3 {
			return nil, io.ErrUnexpectedEOF
		}
		n, hdr = int(binary.BigEndian.Uint16(p[1:])), 3
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		if len(p) < 5 {
			return nil, io.ErrUnexpectedEOF
		}
		n, hdr = int(binary.BigEndian.Uint32(p[1:])), 5
	case c == msgpcode.Nil:
		d.skipBytes(1)
		return p[:0], nil
	default:
		return nil, fmt.Errorf("want a string or bytes, got msgpack type 0x%02x", c)
	}
	if n > len(p)-hdr {
		return nil, fmt.Errorf("string of %d bytes, only %d left", n, len(p)-hdr)
	}
	d.skipBytes(hdr + n)
	return p[hdr : hdr+n : hdr+n], nil
}

// peekCode returns the next msgpack code without consuming it.
func (d *Decoder) peekCode() (byte, error) {
	if d.r.Len() == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	return d.payload[len(d.payload)-d.r.Len()], nil
}

// arrayLen reads an array header (nil: -1).
func (d *Decoder) arrayLen() (int, error) {
	c, err := d.peekCode()
	if err != nil {
		return 0, err
	}
	if c >= 0x90 && c <= 0x9f {
		d.skipBytes(1)
		return int(c & 0x0f), nil
	}
	return d.dec.DecodeArrayLen()
}

// mapLen reads a map header (nil: -1).
func (d *Decoder) mapLen() (int, error) {
	c, err := d.peekCode()
	if err != nil {
		return 0, err
	}
	if c >= 0x80 && c <= 0x8f {
		d.skipBytes(1)
		return int(c & 0x0f), nil
	}
	return d.dec.DecodeMapLen()
}

// skip skips one value of any type without recursion, so deeply nested garbage cannot
// exhaust the stack.
func (d *Decoder) skip() error {
	pending := 1
	for pending > 0 {
		pending--
		c, err := d.peekCode()
		if err != nil {
			return err
		}
		switch {
		case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
			n, err := d.arrayLen()
			if err != nil {
				return err
			}
			if n > d.r.Len() {
				return fmt.Errorf("array of %d elements, only %d bytes left", n, d.r.Len())
			}
			pending += max(n, 0)
		case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
			n, err := d.mapLen()
			if err != nil {
				return err
			}
			if 2*n > d.r.Len() {
				return fmt.Errorf("map of %d entries, only %d bytes left", n, d.r.Len())
			}
			pending += 2 * max(n, 0)
		default:
			if err := d.dec.Skip(); err != nil {
				return err
			}
		}
	}
	return nil
}
