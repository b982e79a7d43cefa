package sim

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// digest is an engine block hash: vLLM's sha256_cbor output. Its low 64 bits (the last
// 8 bytes, big-endian) are the hash on the wire.
type digest [32]byte

// wire returns the 64-bit value vLLM publishes for the digest.
func (d digest) wire() uint64 { return binary.BigEndian.Uint64(d[24:]) }

// noneHash returns the parent digest of every first block. Like vLLM's init_none_hash,
// a seed gives sha256_cbor(seed) (vLLM with PYTHONHASHSEED=seed) and no seed gives 32
// random bytes, so hashes then differ across processes and restarts.
func noneHash(seed string) (digest, error) {
	if seed == "" {
		var d digest
		if _, err := rand.Read(d[:]); err != nil {
			return d, fmt.Errorf("%w: random none hash: %v", ErrInternal, err)
		}
		return d, nil
	}
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		return digest{}, fmt.Errorf("%w: cbor: %v", ErrInternal, err)
	}
	b, err := em.Marshal(seed)
	if err != nil {
		return digest{}, fmt.Errorf("%w: cbor: %v", ErrInternal, err)
	}
	return sha256.Sum256(b), nil
}

// hasher computes block digests as vLLM's hash_block_tokens with sha256_cbor does:
// sha256 over the canonical CBOR of the tuple (parent digest, tuple(tokens), extra keys
// or None). It writes the CBOR by hand into a reused buffer (the tests check it against
// fxamacker/cbor's canonical encoder), so hashing allocates nothing. Not safe for
// concurrent use.
type hasher struct {
	buf []byte
}

// block returns the digest of one block. extra holds the block's extra keys (strings:
// the LoRA name, the cache salt); nil or empty encodes None.
func (h *hasher) block(parent *digest, tokens []uint32, extra []string) digest {
	b := h.buf[:0]
	b = append(b, 0x83)    // array(3)
	b = cborHead(b, 2, 32) // bytes(32)
	b = append(b, parent[:]...)
	b = cborHead(b, 4, uint64(len(tokens)))
	for _, t := range tokens {
		b = cborHead(b, 0, uint64(t))
	}
	if len(extra) == 0 {
		b = append(b, 0xf6) // null
	} else {
		b = cborHead(b, 4, uint64(len(extra)))
		for _, s := range extra {
			b = cborHead(b, 3, uint64(len(s)))
			b = append(b, s...)
		}
	}
	h.buf = b
	return sha256.Sum256(b)
}

// cborHead appends a CBOR head of major type major with argument v in its shortest form,
// as canonical CBOR requires.
func cborHead(b []byte, major byte, v uint64) []byte {
	m := major << 5
	switch {
	case v < 24:
		return append(b, m|byte(v))
	case v <= 0xff:
		return append(b, m|24, byte(v))
	case v <= 0xffff:
		return append(b, m|25, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return append(b, m|26, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(b, m|27, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}
