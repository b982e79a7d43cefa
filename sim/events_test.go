package sim

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

var vectorsDir = filepath.Join("..", "testdata", "vllm-kv-events")

func loadVectors(t *testing.T) map[string][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorsDir, "vectors.json"))
	if err != nil {
		t.Fatalf("golden vectors missing (testdata/vllm-kv-events): %v", err)
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for k, v := range m {
		b, err := hex.DecodeString(v)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out[k] = b
	}
	return out
}

// goldenTS is the timestamp inside the golden vectors (bytes cb 41 d9 54 fc 40 20 00 00).
func goldenTS(t *testing.T, b []byte) float64 {
	t.Helper()
	if b[1] != 0xcb {
		t.Fatalf("vector does not start with a float64 timestamp: % x", b[:2])
	}
	var v uint64
	for _, c := range b[2:10] {
		v = v<<8 | uint64(c)
	}
	return math.Float64frombits(v)
}

func TestEncodeBatchMatchesGoldenBytes(t *testing.T) {
	vec := loadVectors(t)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}

	// V1: map-form BlockStored, two blocks, tokens 1..8, block size 4, no parent.
	var b eventBuf
	b.stored(0, false, "", "")
	b.storedBlock(0x84b146b151d55111, toks[:4])
	b.storedBlock(0xd43b57df56b58fb1, toks[4:])
	got := encodeBatch(nil, goldenTS(t, vec["V1"]), &b, false, 4, 0)
	if hex.EncodeToString(got) != hex.EncodeToString(vec["V1"]) {
		t.Errorf("V1 map form:\n got %x\nwant %x", got, vec["V1"])
	}

	// V2: map-form BlockRemoved then AllBlocksCleared.
	b.reset()
	b.removed(0xd43b57df56b58fb1)
	b.cleared()
	got = encodeBatch(nil, goldenTS(t, vec["V2"]), &b, false, 4, 0)
	if hex.EncodeToString(got) != hex.EncodeToString(vec["V2"]) {
		t.Errorf("V2 map form:\n got %x\nwant %x", got, vec["V2"])
	}

	// V3: legacy array-form BlockStored with a parent, one block 5..8.
	b.reset()
	b.stored(0x84b146b151d55111, true, "", "")
	b.storedBlock(0xd43b57df56b58fb1, toks[4:])
	got = encodeBatch(nil, goldenTS(t, vec["V3"]), &b, true, 4, 0)
	if hex.EncodeToString(got) != hex.EncodeToString(vec["V3"]) {
		t.Errorf("V3 array form:\n got %x\nwant %x", got, vec["V3"])
	}
}

// FuzzEncodeBatch: any mix of events encodes to msgpack that a generic decoder reads
// back to the same values, in both forms.
func FuzzEncodeBatch(f *testing.F) {
	f.Add([]byte{3, 1, 200, 7, 0, 9}, uint8(4), "sql-lora", "salt")
	f.Add([]byte{}, uint8(16), "", "")
	f.Add([]byte{0xff, 0xfe, 2, 2, 2, 1, 1, 0}, uint8(1), "", "a-salt-longer-than-thirty-two-bytes-for-str8")
	f.Fuzz(func(t *testing.T, plan []byte, bs uint8, lora, salt string) {
		blockSize := int(bs%32) + 1
		var b eventBuf
		type want struct {
			kind   uint8
			hashes []uint64
			tokens []uint32
			parent any
			salt   string
		}
		var wants []want
		for i, c := range plan {
			h := uint64(c) * 0x9e3779b97f4a7c15 >> (c % 64)
			switch c % 3 {
			case 0:
				n := int(c%5) + 1
				hasParent := c%2 == 0
				var parent any
				if hasParent {
					parent = h ^ 1
				}
				s := ""
				if !hasParent {
					s = salt
				}
				b.stored(h^1, hasParent, lora, s)
				w := want{kind: kindStored, parent: parent, salt: s}
				for j := range n {
					toks := seqTokens(int(c)*1000+j*blockSize+i, blockSize)
					b.storedBlock(h+uint64(j), toks)
					w.hashes = append(w.hashes, h+uint64(j))
					w.tokens = append(w.tokens, toks...)
				}
				wants = append(wants, w)
			case 1:
				b.removed(h)
				wants = append(wants, want{kind: kindRemoved, hashes: []uint64{h}})
			default:
				b.cleared()
				wants = append(wants, want{kind: kindAllCleared})
			}
		}
		for _, arrayForm := range []bool{false, true} {
			var batch []any
			if err := msgpack.Unmarshal(encodeBatch(nil, 1.5, &b, arrayForm, blockSize, 3), &batch); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if len(batch) != 3 || batch[0].(float64) != 1.5 || toU64(t, batch[2]) != 3 {
				t.Fatalf("batch header %v", batch)
			}
			evs := batch[1].([]any)
			if len(evs) != len(wants) {
				t.Fatalf("%d events, want %d", len(evs), len(wants))
			}
			for i, ev := range evs {
				w := wants[i]
				var f map[string]any
				var typ string
				if arrayForm {
					a := ev.([]any)
					typ = a[0].(string)
					f = map[string]any{}
					names := []string{"", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"}
					if typ == evRemoved {
						names = []string{"", "block_hashes", "medium", "group_idx"}
					}
					for j := 1; j < len(a); j++ {
						f[names[j]] = a[j]
					}
				} else {
					f = ev.(map[string]any)
					typ = f["type"].(string)
				}
				switch w.kind {
				case kindStored:
					if typ != evStored || int(toU64(t, f["block_size"])) != blockSize || f["medium"] != "GPU" {
						t.Fatalf("event %d: %v", i, f)
					}
					if (w.parent == nil) != (f["parent_block_hash"] == nil) || (w.parent != nil && toU64(t, f["parent_block_hash"]) != w.parent.(uint64)) {
						t.Fatalf("event %d parent %v, want %v", i, f["parent_block_hash"], w.parent)
					}
					hs := f["block_hashes"].([]any)
					ts := f["token_ids"].([]any)
					ek := f["extra_keys"].([]any)
					if len(hs) != len(w.hashes) || len(ts) != len(w.tokens) || len(ek) != len(w.hashes) {
						t.Fatalf("event %d lengths %d %d %d", i, len(hs), len(ts), len(ek))
					}
					for j := range hs {
						if toU64(t, hs[j]) != w.hashes[j] {
							t.Fatalf("hash %d", j)
						}
					}
					for j := range ts {
						if uint32(toU64(t, ts[j])) != w.tokens[j] {
							t.Fatalf("token %d", j)
						}
					}
					first := extraKeys(lora, w.salt, true)
					if got := fmt.Sprint(ek[0]); got != fmt.Sprint(anyStrings(first.slice())) {
						t.Fatalf("first extra keys %s, want %v", got, first.slice())
					}
					if lora != "" && f["lora_name"] != lora || lora == "" && f["lora_name"] != nil {
						t.Fatalf("lora_name %v", f["lora_name"])
					}
				case kindRemoved:
					if typ != evRemoved || toU64(t, f["block_hashes"].([]any)[0]) != w.hashes[0] {
						t.Fatalf("event %d: %v", i, f)
					}
				default:
					if typ != evCleared {
						t.Fatalf("event %d: %v", i, f)
					}
				}
			}
		}
	})
}

func anyStrings(s []string) any {
	if len(s) == 0 {
		return nil
	}
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
