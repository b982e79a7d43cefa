package sim

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

var vectorsDir = filepath.Join("..", "..", "shared", "specs", "vectors")

func loadVectors(t *testing.T) map[string][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorsDir, "vectors.json"))
	if err != nil {
		t.Skipf("golden vectors not available: %v", err)
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
