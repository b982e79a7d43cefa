package tokenizer

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// referenceMerges is the model's merge rules as a Go map (first rank per pair),
// built from the rule list independently of the flat merge table.
var referenceMerges sync.Map // *bpeModel → map[uint64]merge

func referenceRules(m *bpeModel) map[uint64]merge {
	if r, ok := referenceMerges.Load(m); ok {
		return r.(map[uint64]merge)
	}
	rules := make(map[uint64]merge, len(m.merges)/12)
	for rank := range len(m.merges) / 12 {
		r := m.merges[12*rank:]
		k := pairKey(le32(r), le32(r[4:]))
		if _, dup := rules[k]; !dup {
			rules[k] = merge{rank: uint32(rank), id: le32(r[8:])}
		}
	}
	referenceMerges.Store(m, rules)
	return rules
}

// referenceEncodeWord is the straightforward merge loop (rescan every pair after
// each merge) that bpeModel.encodeWord's cached-rank loop must reproduce.
func referenceEncodeWord(m *bpeModel, word string) []uint32 {
	if m.ignoreMerges {
		if id, ok := m.vocab.lookupString(word); ok {
			return []uint32{id}
		}
	}
	merges := referenceRules(m)
	var syms []uint32
	for i := 0; i < len(word); i++ {
		syms = append(syms, m.byteID[word[i]])
	}
	for len(syms) > 1 {
		best, bestRank := -1, uint32(0)
		var bestID uint32
		for i := 0; i+1 < len(syms); i++ {
			if mg, ok := merges[pairKey(syms[i], syms[i+1])]; ok && (best < 0 || mg.rank < bestRank) {
				best, bestRank, bestID = i, mg.rank, mg.id
			}
		}
		if best < 0 {
			break
		}
		syms[best] = bestID
		syms = append(syms[:best+1], syms[best+2:]...)
	}
	return syms
}

func checkBPE(t *testing.T, m *bpeModel, word string, work []uint32) []uint32 {
	t.Helper()
	got, work, err := m.encodeWord(nil, word, work)
	if err != nil {
		t.Fatalf("%q: %v", word, err)
	}
	if want := referenceEncodeWord(m, word); !slices.Equal(got, want) {
		t.Fatalf("%q: got %v, want %v", word, got, want)
	}
	return work
}

// TestBPEMatchesReference: every pre-token of the golden texts, plus random byte
// strings, merges to the same ids as the reference loop.
func TestBPEMatchesReference(t *testing.T) {
	m := mustDefault(t)
	var work []uint32
	n, limit, random := 0, 1<<30, 2000
	if testing.Short() {
		limit, random = 3000, 300 // the race detector makes the reference loop slow
	}
	for _, c := range readGolden(t, "qwen3") {
		if c.Kind != "encode" || n >= limit {
			continue
		}
		words, _ := m.c.pre.split(nil, c.Text, nil)
		for _, w := range words {
			if w != "" {
				work = checkBPE(t, m.c.bpe, w, work)
				n++
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range random {
		b := make([]byte, 1+r.IntN(40))
		const alphabet = "aeiou nrst.'\n\xc3\xa9\xe6\x97\xa5"
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		work = checkBPE(t, m.c.bpe, string(b), work)
	}
	t.Logf("%d golden pre-tokens and %d random words merge like the reference", n, random)
}

func FuzzBPEMatchesReference(f *testing.F) {
	for _, s := range []string{"hello", " world", "aaaaaaaa", "résumé", "日本語", "\n\n\n", "12345"} {
		f.Add(s)
	}
	m := mustDefault(f)
	f.Fuzz(func(t *testing.T, word string) {
		if word == "" || len(word) > 512 {
			return
		}
		checkBPE(t, m.c.bpe, word, nil)
	})
}

// BenchmarkBPEReference / BenchmarkBPECachedRanks: the merge loops alone over the
// pre-tokens of the 8k document (no caches).
func benchWords(b *testing.B) (*bpeModel, []string) {
	m := mustDefault(b)
	words, _ := m.c.pre.split(nil, benchDoc(b, "doc-8k-a"), nil)
	return m.c.bpe, words
}

func BenchmarkBPEReference(b *testing.B) {
	m, words := benchWords(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, w := range words {
			referenceEncodeWord(m, w)
		}
	}
}

func BenchmarkBPECachedRanks(b *testing.B) {
	m, words := benchWords(b)
	var work, dst []uint32
	b.ReportAllocs()
	for b.Loop() {
		for _, w := range words {
			dst, work, _ = m.encodeWord(dst[:0], w, work)
		}
	}
}
