package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

var updateCompact = flag.Bool("update-compact", false, "rewrite models/qwen3/tokenizer.compact from models/qwen3/tokenizer.json.gz (go generate ./tokenizer)")

const (
	qwen3JSONPath    = "models/qwen3/tokenizer.json.gz"
	qwen3CompactPath = "models/qwen3/tokenizer.compact"
)

// qwen3JSON is the committed Qwen3 tokenizer.json, the source of the compact form.
var qwen3JSON = sync.OnceValues(func() ([]byte, error) {
	gz, err := os.ReadFile(qwen3JSONPath)
	if err != nil {
		return nil, err
	}
	return gunzip(gz)
})

// qwen3Scanned is the committed tokenizer.json through the loader's fast scanner,
// once: the compact-form tests share it (the scan costs seconds under -race).
var qwen3Scanned = sync.OnceValues(func() (*scannedJSON, error) {
	data, err := qwen3JSON()
	if err != nil {
		return nil, err
	}
	skeleton, body, ok := scanTokenizerJSON(data)
	if !ok {
		return nil, errors.New("the fast scanner must take Qwen3's tokenizer.json")
	}
	return &scannedJSON{skeleton: skeleton, body: body}, nil
})

type scannedJSON struct {
	skeleton []byte
	body     *bpeBody
}

func mustQwen3Scanned(t testing.TB) *scannedJSON {
	t.Helper()
	s, err := qwen3Scanned()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustQwen3JSON(t testing.TB) []byte {
	t.Helper()
	data, err := qwen3JSON()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCompactEmbeddedCurrent fails when the committed compact form is not what
// the generator writes from the committed tokenizer.json (like a proto check);
// with -update-compact it rewrites it (go generate ./tokenizer).
func TestCompactEmbeddedCurrent(t *testing.T) {
	want, err := encodeCompactParts(mustQwen3Scanned(t).skeleton, mustQwen3Scanned(t).body)
	if err != nil {
		t.Fatal(err)
	}
	if *updateCompact {
		if err := os.WriteFile(qwen3CompactPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", qwen3CompactPath, len(want))
		return
	}
	if !bytes.Equal(qwen3Compact, want) {
		t.Fatalf("%s is stale (%d bytes embedded, generator writes %d): run `go generate ./tokenizer`",
			qwen3CompactPath, len(qwen3Compact), len(want))
	}
	onDisk, err := os.ReadFile(qwen3CompactPath)
	if err != nil || !bytes.Equal(onDisk, want) {
		t.Fatalf("%s on disk differs from the generator's output (%v): run `go generate ./tokenizer`", qwen3CompactPath, err)
	}
}

// coreDiff names what differs between two parsed tokenizers in everything that
// decides ids and text: the BPE model (vocabulary bytes, merge rules, merge table,
// byte ids, options), the other pipeline components, added tokens and template.
func coreDiff(got, want *core) []string {
	gb, wb := *got.bpe, *want.bpe
	gv, wv := *gb.vocab, *wb.vocab
	src := func(c *core) string {
		if c.chat == nil {
			return ""
		}
		return c.chat.source
	}
	var diffs []string
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"vocab kinds", gv.kind, wv.kind},
		{"vocab offsets", gv.off, wv.off},
		{"vocab arena", gv.arena, wv.arena},
		{"vocab index present", gv.index != nil, wv.index != nil},
		{"merges", gb.merges, wb.merges},
		{"merge table", gb.table.slots, wb.table.slots},
		{"byte ids", gb.byteID, wb.byteID},
		{"byte presence", gb.hasByte, wb.hasByte},
		{"ignore_merges", gb.ignoreMerges, wb.ignoreMerges},
		{"normalizer", got.normalizer, want.normalizer},
		{"pre-tokenizer", got.pre, want.pre},
		{"post-processor", got.post, want.post},
		{"added tokens", got.addedByID, want.addedByID},
		{"raw matcher", got.rawMatcher, want.rawMatcher},
		{"normalized matcher", got.normMatcher, want.normMatcher},
		{"clean-up", got.cleanUp, want.cleanUp},
		{"specials", got.specials, want.specials},
		{"chat template", src(got), src(want)},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			diffs = append(diffs, c.name)
		}
	}
	return diffs
}

func sameCore(t *testing.T, what string, got, want *core) {
	t.Helper()
	for _, d := range coreDiff(got, want) {
		t.Errorf("%s: %s differ", what, d)
	}
	if len(got.bpe.vocab.kind) == 0 || len(got.bpe.merges) == 0 {
		t.Fatalf("%s: empty model", what)
	}
}

// TestCompactMatchesJSON proves the embedded compact form loads the tokenizer that
// parsing the committed tokenizer.json gives, by the fast scanner and (without
// -short: encoding/json is slow under the race detector) by the generic path.
func TestCompactMatchesJSON(t *testing.T) {
	data := mustQwen3JSON(t)
	tc, err := gunzip(qwen3ConfigGz)
	if err != nil {
		t.Fatal(err)
	}
	fromCompact, err := parseCompactCore(qwen3Compact, tc)
	if err != nil {
		t.Fatal(err)
	}
	// parseCore without scanning again: the shared scan, then what parseCore
	// does with it.
	scanned := mustQwen3Scanned(t)
	var f tokenizerFile
	if err := json.Unmarshal(scanned.skeleton, &f); err != nil {
		t.Fatal(err)
	}
	fromJSON, err := buildCore(&f, scanned.body, tc)
	if err != nil {
		t.Fatal(err)
	}
	sameCore(t, "compact vs scanned JSON", fromCompact, fromJSON)
	if testing.Short() {
		t.Log("generic (encoding/json) comparison skipped in -short mode")
		return
	}
	generic, err := parseCoreGeneric(data, tc)
	if err != nil {
		t.Fatal(err)
	}
	sameCore(t, "scanned vs encoding/json JSON", fromJSON, generic)
}

// parseCoreGeneric is parseCore with the fast scanner off: encoding/json decodes
// everything (the loader's fallback path, and the loader before the scanner).
func parseCoreGeneric(tokenizerJSON, configJSON []byte) (*core, error) {
	var f tokenizerFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	return buildCore(&f, nil, configJSON)
}

// TestScannerMatchesGenericLlama: the Llama 3.1 tokenizer (merges in the "a b"
// form, ignore_merges) loads the same by both paths.
func TestScannerMatchesGenericLlama(t *testing.T) {
	if testing.Short() {
		t.Skip("encoding/json on a 9 MB file is slow under the race detector; runs without -short")
	}
	llamaModel(t) // skips when not fetched
	data, err := os.ReadFile(filepath.Join(llamaDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := os.ReadFile(filepath.Join(llamaDir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := scanTokenizerJSON(data); !ok {
		t.Fatal("the fast scanner must take Llama 3.1's tokenizer.json")
	}
	fast, err := parseCore(data, tc)
	if err != nil {
		t.Fatal(err)
	}
	generic, err := parseCoreGeneric(data, tc)
	if err != nil {
		t.Fatal(err)
	}
	sameCore(t, "llama scanned vs encoding/json", fast, generic)
}

func TestCompactCorrupt(t *testing.T) {
	good := qwen3Compact
	flip := bytes.Clone(good)
	flip[len(flip)/2] ^= 1
	for name, blob := range map[string][]byte{
		"empty":     nil,
		"bad magic": append([]byte("kvtokc9\n"), good[8:]...),
		"bit flip":  flip,
		"truncated": good[:len(good)/2],
	} {
		if _, err := parseCompactCore(blob, nil); !errors.Is(err, errCompact) {
			t.Errorf("%s: got %v, want errCompact", name, err)
		}
	}
}
