package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
)

// The compact form of a tokenizer.json, for the embedded default model: the
// document without model.vocab and model.merges (the "skeleton", decoded by
// encoding/json and the component parsers exactly as the JSON is), followed by
// the vocabulary and merge triples in the layout the model uses at run time, so
// loading them is slicing, not parsing. It is generated from the committed
// models/qwen3/tokenizer.json.gz by `go generate ./tokenizer` (which runs
// TestCompactEmbeddedCurrent with -update-compact); that test fails when the
// committed file is not what the generator writes, and TestCompactMatchesJSON
// proves the model it loads equals the one parsed from the JSON.
//
// Layout (integers little-endian uint32):
//
//	magic "kvtokc1\n"
//	skeleton length, skeleton bytes
//	id count n, kind [n]byte, offsets [n+1]uint32, arena length, arena bytes
//	merge count m, merges [m](left, right, merged id)
//	CRC-32 (IEEE) of everything before it
const compactMagic = "kvtokc1\n"

var errCompact = errors.New("tokenizer: corrupt compact tokenizer")

// encodeCompact writes the compact form of a tokenizer.json the fast scanner reads.
func encodeCompact(tokenizerJSON []byte) ([]byte, error) {
	skeleton, body, ok := scanTokenizerJSON(tokenizerJSON)
	if !ok {
		return nil, fmt.Errorf("tokenizer: compact form: the scanner does not take this tokenizer.json (encoding/json would)")
	}
	return encodeCompactParts(skeleton, body)
}

// encodeCompactParts writes the compact form of a scanned tokenizer.json.
func encodeCompactParts(skeleton []byte, body *bpeBody) ([]byte, error) {
	if body.err != nil {
		return nil, fmt.Errorf("tokenizer: compact form: %w", body.err)
	}
	v := body.vocab
	out := make([]byte, 0, len(compactMagic)+4*5+len(skeleton)+len(v.kind)+len(v.off)+len(v.arena)+len(body.merges))
	u32 := func(n int) { out = binary.LittleEndian.AppendUint32(out, uint32(n)) }
	out = append(out, compactMagic...)
	u32(len(skeleton))
	out = append(out, skeleton...)
	u32(len(v.kind))
	out = append(out, v.kind...)
	out = append(out, v.off...)
	u32(len(v.arena))
	out = append(out, v.arena...)
	u32(len(body.merges) / 12)
	out = append(out, body.merges...)
	return binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(out)), nil
}

// decodeCompact splits a compact form into its skeleton and body. The body's
// slices point into blob (which must not change).
func decodeCompact(blob []byte) (skeleton []byte, body *bpeBody, err error) {
	if len(blob) < len(compactMagic)+4 || string(blob[:len(compactMagic)]) != compactMagic {
		return nil, nil, fmt.Errorf("%w: bad magic", errCompact)
	}
	n := len(blob) - 4
	if crc32.ChecksumIEEE(blob[:n]) != le32(blob[n:]) {
		return nil, nil, fmt.Errorf("%w: checksum mismatch", errCompact)
	}
	rest := blob[len(compactMagic):n]
	take := func(size uint64) []byte {
		if err != nil || size > uint64(len(rest)) {
			err = fmt.Errorf("%w: truncated", errCompact)
			return nil
		}
		b := rest[:size:size]
		rest = rest[size:]
		return b
	}
	count := func() uint64 {
		if b := take(4); b != nil {
			return uint64(le32(b))
		}
		return 0
	}
	skeleton = take(count())
	ids := count()
	v := &vocabulary{kind: take(ids), off: take(4 * (ids + 1))}
	v.arena = take(count())
	merges := take(12 * count())
	if err != nil {
		return nil, nil, err
	}
	if len(rest) != 0 {
		return nil, nil, fmt.Errorf("%w: %d trailing bytes", errCompact, len(rest))
	}
	if err := v.check(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errCompact, err)
	}
	return skeleton, &bpeBody{vocab: v, merges: merges}, nil
}

// parseCompactCore is parseCore for a compact form.
func parseCompactCore(blob, configJSON []byte) (*core, error) {
	skeleton, body, err := decodeCompact(blob)
	if err != nil {
		return nil, err
	}
	var f tokenizerFile
	if err := json.Unmarshal(skeleton, &f); err != nil {
		return nil, fmt.Errorf("%w: skeleton: %v", errCompact, err)
	}
	return buildCore(&f, body, configJSON)
}
