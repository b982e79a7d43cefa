package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"testing"
)

// legacyBPE is the loader before the flat vocabulary (commit 7af61e0), kept
// verbatim in what it allocates so the load benchmarks show before and after in
// one run: the whole tokenizer.json through encoding/json, the vocabulary as two
// maps (raw bytes → id, id → text), the merges as a map and the flat table.
type legacyBPE struct {
	vocab  map[string]uint32
	tokens map[uint32]string
	merges map[uint64]merge
	table  *mergeTable
}

func legacyLoad(tokenizerJSON []byte) (*legacyBPE, error) {
	var f tokenizerFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, err
	}
	var j bpeJSON
	if err := json.Unmarshal(f.Model, &j); err != nil {
		return nil, err
	}
	m := &legacyBPE{vocab: make(map[string]uint32, len(j.Vocab)), tokens: make(map[uint32]string, len(j.Vocab))}
	var buf []byte
	for tok, id := range j.Vocab {
		m.tokens[id] = tok
		raw, ok := byteLevelDecode(buf[:0], tok)
		if !ok {
			continue
		}
		buf = raw
		m.vocab[string(raw)] = id
	}
	merges, err := parseMerges(j.Merges)
	if err != nil {
		return nil, err
	}
	m.merges = make(map[uint64]merge, len(merges))
	for rank, mg := range merges {
		lid, rid, nid := j.Vocab[mg[0]], j.Vocab[mg[1]], j.Vocab[mg[0]+mg[1]]
		if _, dup := m.merges[pairKey(lid, rid)]; !dup {
			m.merges[pairKey(lid, rid)] = merge{rank: uint32(rank), id: nid}
		}
	}
	m.table = newMergeTable(len(m.merges))
	for k, mg := range m.merges {
		m.table.put(k, mg)
	}
	return m, nil
}

// BenchmarkLoadDefault: loading the embedded Qwen3 tokenizer. compact is what
// Default() does now; json-scanner is the same model from the gzipped JSON with
// the fast scanner (what Load(dir) does, plus gunzip); json-encoding is the
// generic path (encoding/json decodes everything, flat vocabulary built from
// it); before is the loader as it was (gunzip + encoding/json + maps).
func BenchmarkLoadDefault(b *testing.B) {
	gz, err := os.ReadFile(qwen3JSONPath)
	if err != nil {
		b.Fatal(err)
	}
	tc, err := gunzip(qwen3ConfigGz)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("compact", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := loadEmbedded(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := gunzip(gz)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := parseCore(data, tc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-encoding", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := gunzip(gz)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := parseCoreGeneric(data, tc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("before", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := gunzip(gz)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := legacyLoad(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLoadDir: Load of the Llama 3.1 directory (9 MB tokenizer.json, merges
// in the "a b" form) with the fast scanner, and with encoding/json only.
func BenchmarkLoadDir(b *testing.B) {
	if _, err := os.Stat(filepath.Join(llamaDir, "tokenizer.json")); err != nil {
		b.Skip("Llama 3.1 tokenizer not fetched (bash tokenizer/testdata/fetch-llama.sh)")
	}
	data, err := os.ReadFile(filepath.Join(llamaDir, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Load(llamaDir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseCoreGeneric(data, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGCWithTokenizer: one full garbage collection with a loaded tokenizer
// live — what every GC cycle of a router pays to mark it. flat is the current
// model, maps the previous vocabulary/merge maps.
func BenchmarkGCWithTokenizer(b *testing.B) {
	run := func(b *testing.B, keep any) {
		runtime.GC()
		b.ReportAllocs()
		for b.Loop() {
			runtime.GC()
		}
		scan := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
		metrics.Read(scan)
		b.ReportMetric(float64(scan[0].Value.Uint64()), "scannable-heap-bytes")
		runtime.KeepAlive(keep)
	}
	b.Run("flat", func(b *testing.B) {
		m, err := loadEmbedded()
		if err != nil {
			b.Fatal(err)
		}
		run(b, m)
	})
	b.Run("maps", func(b *testing.B) {
		m, err := legacyLoad(mustQwen3JSON(b))
		if err != nil {
			b.Fatal(err)
		}
		run(b, m)
	})
}

// TestLegacyLoadAgrees keeps the benchmark's "before" honest: the old maps hold
// the same vocabulary and rules as the flat model.
func TestLegacyLoadAgrees(t *testing.T) {
	if testing.Short() {
		t.Skip("encoding/json of the whole file is slow under the race detector")
	}
	old, err := legacyLoad(mustQwen3JSON(t))
	if err != nil {
		t.Fatal(err)
	}
	m := mustDefault(t).c.bpe
	for id, text := range old.tokens {
		tok, kind := m.vocab.token(id)
		raw, ok := byteLevelDecode(nil, text)
		if !ok {
			raw = []byte(text)
		}
		if kind == tokAbsent || string(tok) != string(raw) {
			t.Fatalf("id %d: %q vs %q", id, tok, raw)
		}
	}
	if len(old.tokens) != len(m.vocab.kind) || len(old.merges) == 0 {
		t.Fatalf("%d tokens vs %d ids", len(old.tokens), len(m.vocab.kind))
	}
	for k, mg := range old.merges {
		if got, ok := m.table.get(k); !ok || got != mg {
			t.Fatalf("rule %x: %v vs %v", k, got, mg)
		}
	}
}
