// Package kvblock defines kvroute's block keys: the one vocabulary shared by the router,
// the agents and the index.
//
// A prompt's tokens are cut into full blocks of B tokens (B = the engine's block size).
// Each block gets a 64-bit key chained from the key before it:
//
//	seed  = Seed(model, adapter, cacheSalt)
//	key₀  = Extend(seed, tokens[0:B])
//	keyᵢ  = Extend(keyᵢ₋₁, tokens[iB:(i+1)B])
//
// Extend is xxhash64 over the parent key (8 bytes, little-endian) followed by the block's
// tokens (4 bytes each, little-endian). A partial last block has no key. Keys therefore
// identify a whole prefix, not a block's content alone: equal keys mean equal prefixes.
//
// The scheme is versioned by SchemeVersion and pinned by the golden vectors in testdata/.
// The package computes keys only; it must not know about engines, their own block hashes
// (the agent translates those), or transport. Every function is safe for concurrent use
// and allocation-free when given room in dst.
package kvblock

import (
	"encoding/binary"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// SchemeVersion names the key scheme described in the package comment. It changes
// whenever any key for any input would change; components of different versions must
// not share an index.
const SchemeVersion = 1

// DefaultBlockSize is vLLM's default KV-cache block size, in tokens.
const DefaultBlockSize = 16

// seedDomain separates seeds from every other use of xxhash64 in the fleet.
const seedDomain = "kvroute/kvblock/v1"

// Seed returns the root of every key chain for one (model, adapter, cacheSalt) triple.
// model is the served base model; adapter is the LoRA adapter name or ""; cacheSalt is the
// request's cache_salt or "". Different triples give unrelated chains, so two tenants with
// different salts, or a base model and its adapter, never share a key.
func Seed(model, adapter, cacheSalt string) uint64 {
	var d xxhash.Digest
	d.Reset()
	var n [4]byte
	_, _ = d.WriteString(seedDomain)
	for _, s := range [3]string{model, adapter, cacheSalt} {
		// Length-prefix each field so ("ab","") and ("a","b") differ.
		binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
		_, _ = d.Write(n[:])
		_, _ = d.WriteString(s)
	}
	return d.Sum64()
}

// Extend returns the key of block after the block whose key is parent (or after the
// seed, for a first block). block should hold exactly one block of tokens; Extend does
// not check its length.
func Extend(parent uint64, block []uint32) uint64 {
	if len(block) <= smallBlock {
		var buf [8 + 4*smallBlock]byte
		return extendInto(buf[:], parent, block)
	}
	var d xxhash.Digest
	d.Reset()
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], parent)
	_, _ = d.Write(p[:])
	writeTokens(&d, block)
	return d.Sum64()
}

// smallBlock is the largest block (in tokens) that Extend hashes through a stack buffer.
const smallBlock = 32

// maxStackBlock is the largest block (in tokens) that Keys hashes through its stack buffer.
const maxStackBlock = 256

// extendInto hashes parent and block one-shot through buf, which must hold 8+4·len(block)
// bytes: much cheaper than a streaming Digest for the few dozen bytes of a block.
func extendInto(buf []byte, parent uint64, block []uint32) uint64 {
	binary.LittleEndian.PutUint64(buf[:8], parent)
	n := 8
	if littleEndian && len(block) > 0 {
		n += copy(buf[8:], unsafe.Slice((*byte)(unsafe.Pointer(&block[0])), len(block)*4))
	} else {
		for _, t := range block {
			binary.LittleEndian.PutUint32(buf[n:], t)
			n += 4
		}
	}
	return xxhash.Sum64(buf[:n])
}

// Keys appends to dst the keys of every full block of tokens, chained from seed, and
// returns the extended slice. It does not allocate when dst has room for
// len(tokens)/blockSize more keys. blockSize must be positive; Keys panics otherwise.
// Cost: one xxhash64 pass over the tokens.
func Keys(dst []uint64, seed uint64, tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		panic("kvblock: block size must be positive")
	}
	key := seed
	if blockSize > maxStackBlock {
		for end := blockSize; end <= len(tokens); end += blockSize {
			key = Extend(key, tokens[end-blockSize:end])
			dst = append(dst, key)
		}
		return dst
	}
	var buf [8 + 4*maxStackBlock]byte
	for end := blockSize; end <= len(tokens); end += blockSize {
		key = extendInto(buf[:], key, tokens[end-blockSize:end])
		dst = append(dst, key)
	}
	return dst
}

// NumBlocks returns how many full blocks (and so keys) n tokens make.
func NumBlocks(n, blockSize int) int {
	if blockSize <= 0 {
		return 0
	}
	return n / blockSize
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// writeTokens feeds the tokens to d as little-endian uint32s without copying them on
// little-endian machines, and through a small stack buffer elsewhere.
func writeTokens(d *xxhash.Digest, tokens []uint32) {
	if len(tokens) == 0 {
		return
	}
	if littleEndian {
		_, _ = d.Write(unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), len(tokens)*4))
		return
	}
	var buf [256]byte
	for len(tokens) > 0 {
		n := min(len(tokens), len(buf)/4)
		for i, t := range tokens[:n] {
			binary.LittleEndian.PutUint32(buf[i*4:], t)
		}
		_, _ = d.Write(buf[:n*4])
		tokens = tokens[n:]
	}
}
