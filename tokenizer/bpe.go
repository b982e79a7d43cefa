package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// bpeModel is a byte-level BPE model. Its vocabulary and merges are stored over raw
// bytes (decoded from the byte-level alphabet at load), so words are merged straight
// from the input bytes without mapping them to the alphabet first. Nothing in it
// holds a pointer per token (see vocabulary), so it costs the garbage collector
// nothing to keep.
type bpeModel struct {
	vocab        *vocabulary
	merges       []byte      // the rules in rank order: left, right, merged id (little-endian uint32s)
	table        *mergeTable // the same rules, first (lowest) rank per pair, for the merge loop
	byteID       [256]uint32
	hasByte      [256]bool
	ignoreMerges bool
}

// bpeBody is a BPE model's vocabulary and merge rules, from the fast JSON scanner
// or the compact form; err is a vocabulary or merge problem found while building
// it, reported where the generic path reports it.
type bpeBody struct {
	vocab  *vocabulary
	merges []byte
	err    error
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

// parseBPE builds the model from tokenizer.json's model object. body is its
// vocabulary and merges when the fast scanner or the compact form supplied them
// (raw is then the object without those two members); nil decodes them from raw
// with encoding/json (the generic path).
func parseBPE(raw json.RawMessage, body *bpeBody) (*bpeModel, error) {
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
	if body == nil {
		var err error
		if body, err = genericBody(j.Vocab, j.Merges); err != nil {
			return nil, err
		}
	}
	if body.err != nil {
		return nil, body.err
	}
	m := &bpeModel{vocab: body.vocab, merges: body.merges, ignoreMerges: j.IgnoreMerges}
	if m.ignoreMerges && m.vocab.index == nil {
		m.vocab.buildIndex()
	} else if !m.ignoreMerges {
		m.vocab.index = nil // only looked up for ignore_merges
	}
	for id, k := range m.vocab.kind {
		if k != tokBytes {
			continue
		}
		if t, _ := m.vocab.token(uint32(id)); len(t) == 1 {
			m.byteID[t[0]] = uint32(id)
			m.hasByte[t[0]] = true
		}
	}
	n := len(m.merges) / 12
	m.table = newMergeTable(n)
	for rank := range n {
		r := m.merges[12*rank : 12*rank+12]
		left, right, id := le32(r), le32(r[4:]), le32(r[8:])
		if int(max(left, right, id)) >= len(m.vocab.kind) {
			return nil, fmt.Errorf("model BPE merge %d: id out of range", rank)
		}
		m.table.put(pairKey(left, right), merge{rank: uint32(rank), id: id})
	}
	return m, nil
}

// genericBody builds the body from encoding/json's decoding of the model object
// (the path for anything the fast scanner leaves to encoding/json).
func genericBody(vocab map[string]uint32, rawMerges json.RawMessage) (*bpeBody, error) {
	b := newVocabBuilder(len(vocab), 8*len(vocab))
	for tok, id := range vocab {
		b.add([]byte(tok), id)
	}
	merges, err := parseMerges(rawMerges)
	if err != nil {
		return nil, fmt.Errorf("model BPE: %w", err)
	}
	r := b.resolver()
	for rank, mg := range merges {
		r.add(rank, []byte(mg[0]), []byte(mg[1]))
	}
	err = b.err
	if err == nil {
		err = r.err
	}
	return &bpeBody{vocab: r.v, merges: r.out, err: err}, nil
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
		if id, ok := m.vocab.lookupString(word); ok {
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
