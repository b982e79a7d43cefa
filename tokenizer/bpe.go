package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// bpeModel is a byte-level BPE model. Its vocabulary and merges are stored over raw
// bytes (decoded from the byte-level alphabet at load), so words are merged straight
// from the input bytes without mapping them to the alphabet first.
type bpeModel struct {
	vocab        map[string]uint32 // raw bytes → id
	merges       map[uint64]merge  // left id<<32 | right id → rule
	table        *mergeTable       // the same rules, for the merge loop
	byteID       [256]uint32
	hasByte      [256]bool
	ignoreMerges bool
	// tokens maps an id to its token as written in tokenizer.json (byte-level text).
	tokens map[uint32]string
}

type merge struct {
	rank uint32
	id   uint32
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

type bpeJSON struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
	Dropout                 *float64          `json:"dropout"`
	UNKToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUNK                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
}

func parseBPE(raw json.RawMessage) (*bpeModel, error) {
	var j bpeJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		if typ, _ := componentType(raw); typ != "BPE" && typ != "" {
			return nil, fmt.Errorf("%w: model %q (only byte-level BPE is supported)", ErrUnsupported, typ)
		}
		return nil, fmt.Errorf("model: %w", err)
	}
	if j.Type != "BPE" && j.Type != "" {
		return nil, fmt.Errorf("%w: model %q (only byte-level BPE is supported)", ErrUnsupported, j.Type)
	}
	switch {
	case j.Dropout != nil && *j.Dropout != 0:
		return nil, fmt.Errorf("%w: model BPE with dropout %g", ErrUnsupported, *j.Dropout)
	case j.ContinuingSubwordPrefix != nil && *j.ContinuingSubwordPrefix != "":
		return nil, fmt.Errorf("%w: model BPE continuing_subword_prefix %q", ErrUnsupported, *j.ContinuingSubwordPrefix)
	case j.EndOfWordSuffix != nil && *j.EndOfWordSuffix != "":
		return nil, fmt.Errorf("%w: model BPE end_of_word_suffix %q", ErrUnsupported, *j.EndOfWordSuffix)
	case j.ByteFallback:
		return nil, fmt.Errorf("%w: model BPE byte_fallback (SentencePiece-style BPE)", ErrUnsupported)
	}
	m := &bpeModel{
		vocab:        make(map[string]uint32, len(j.Vocab)),
		ignoreMerges: j.IgnoreMerges,
		tokens:       make(map[uint32]string, len(j.Vocab)),
	}
	var buf []byte
	for tok, id := range j.Vocab {
		m.tokens[id] = tok
		raw, ok := byteLevelDecode(buf[:0], tok)
		if !ok {
			// Not byte-level text: unreachable from byte-level input, kept for decoding.
			continue
		}
		buf = raw
		m.vocab[string(raw)] = id
		if len(raw) == 1 {
			m.byteID[raw[0]] = id
			m.hasByte[raw[0]] = true
		}
	}
	merges, err := parseMerges(j.Merges)
	if err != nil {
		return nil, fmt.Errorf("model BPE: %w", err)
	}
	m.merges = make(map[uint64]merge, len(merges))
	for rank, mg := range merges {
		left, right := mg[0], mg[1]
		lid, lok := j.Vocab[left]
		rid, rok := j.Vocab[right]
		nid, nok := j.Vocab[left+right]
		if !lok || !rok || !nok {
			return nil, fmt.Errorf("model BPE merge %d (%q %q): token not in vocab", rank, left, right)
		}
		k := pairKey(lid, rid)
		if _, dup := m.merges[k]; !dup { // the first (lowest) rank wins
			m.merges[k] = merge{rank: uint32(rank), id: nid}
		}
	}
	m.table = newMergeTable(len(m.merges))
	for k, mg := range m.merges {
		m.table.put(k, mg)
	}
	return m, nil
}

// parseMerges reads the merges in either the "a b" or the ["a", "b"] form.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var flat []string
	if err := json.Unmarshal(raw, &flat); err == nil {
		out := make([][2]string, len(flat))
		for i, s := range flat {
			left, right, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("merge %d %q has no space", i, s)
			}
			out[i] = [2]string{left, right}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges are neither \"a b\" strings nor [\"a\",\"b\"] pairs: %v", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d has %d parts", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// encodeWord appends the ids of one pre-token (raw bytes) to dst. work is scratch.
func (m *bpeModel) encodeWord(dst []uint32, word string, work []uint32) ([]uint32, []uint32, error) {
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id), work, nil
		}
	}
	syms := work[:0]
	for i := 0; i < len(word); i++ {
		b := word[i]
		if !m.hasByte[b] {
			return dst, syms, fmt.Errorf("%w: byte 0x%02x has no token in the vocabulary", ErrUnsupported, b)
		}
		syms = append(syms, m.byteID[b])
	}
	// Greedy merging: always the lowest-ranked adjacent pair, leftmost on ties —
	// the order Hugging Face's priority queue produces. ranks[i] caches the rank of
	// the pair (syms[i], syms[i+1]), so a merge costs two lookups, not a rescan.
	if len(syms) < 2 {
		return append(dst, syms...), syms, nil
	}
	n := len(syms)
	syms = append(syms, make([]uint32, n-1)...) // ranks live after the symbols
	ranks := syms[n:]
	syms = syms[:n]
	for i := 0; i+1 < n; i++ {
		ranks[i] = m.rank(syms[i], syms[i+1])
	}
	for len(syms) > 1 {
		best, bestRank := -1, uint32(noMerge)
		for i, r := range ranks[:len(syms)-1] {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		mg, _ := m.table.get(pairKey(syms[best], syms[best+1]))
		syms[best] = mg.id
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:len(syms)])
		if best > 0 {
			ranks[best-1] = m.rank(syms[best-1], syms[best])
		}
		if best+1 < len(syms) {
			ranks[best] = m.rank(syms[best], syms[best+1])
		}
	}
	return append(dst, syms...), syms[:cap(syms)][:0], nil
}

// noMerge is the rank of a pair with no merge rule.
const noMerge = ^uint32(0)

func (m *bpeModel) rank(a, b uint32) uint32 {
	if mg, ok := m.table.get(pairKey(a, b)); ok {
		return mg.rank
	}
	return noMerge
}
