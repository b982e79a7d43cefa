package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// The engine hash is vLLM's sha256_cbor chain: the golden digests were computed by vLLM
// for block size 4 and tokens 1..8 with PYTHONHASHSEED=0 (key "0|i") and with the seed
// string "vllm-none-hash" (key "vllm-none-hash|i").
func TestHashMatchesVLLMSha256CBOR(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorsDir, "hashes.json"))
	if err != nil {
		t.Fatalf("golden hashes missing (testdata/vllm-kv-events): %v", err)
	}
	var golden map[string][2]any
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	var h hasher
	for _, seed := range []string{"0", "vllm-none-hash"} {
		none, err := noneHash(seed)
		if err != nil {
			t.Fatal(err)
		}
		b0 := h.block(&none, []uint32{1, 2, 3, 4}, nil)
		b1 := h.block(&b0, []uint32{5, 6, 7, 8}, nil)
		for i, d := range []digest{b0, b1} {
			g := golden[seed+"|"+string(rune('0'+i))]
			if hex.EncodeToString(d[:]) != g[0].(string) {
				t.Errorf("%s block %d: digest %x, want %s", seed, i, d, g[0])
			}
			if float64(d.wire()) != g[1].(float64) {
				t.Errorf("%s block %d: wire %d, want %v", seed, i, d.wire(), g[1])
			}
		}
	}
}

// The hand-written CBOR equals fxamacker/cbor's canonical encoding for every shape the
// engine hashes (token widths across every CBOR length class, extra keys or None).
func TestHandCBORMatchesCanonicalEncoder(t *testing.T) {
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	parent := sha256.Sum256([]byte("p"))
	cases := []struct {
		tokens []uint32
		extra  []string
	}{
		{[]uint32{0, 23, 24, 255, 256, 65535, 65536, 4294967295}, nil},
		{seqTokens(100000, 16), []string{"sql-lora"}},
		{seqTokens(1, 30), []string{"sql-lora", "a salt that is longer than twenty-four bytes"}},
		{seqTokens(7, 300), []string{"x"}},
	}
	var h hasher
	for _, c := range cases {
		var extra any
		if c.extra != nil {
			extra = c.extra
		}
		want, err := em.Marshal([]any{parent[:], c.tokens, extra})
		if err != nil {
			t.Fatal(err)
		}
		p := digest(parent)
		got := h.block(&p, c.tokens, c.extra)
		if got != sha256.Sum256(want) || !bytes.Equal(h.buf, want) {
			t.Errorf("tokens %v extra %v:\n got %x\nwant %x", c.tokens[:min(4, len(c.tokens))], c.extra, h.buf, want)
		}
	}
}

func TestRandomNoneHashDiffers(t *testing.T) {
	a, err := noneHash("")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := noneHash("")
	if a == b {
		t.Fatal("two random none hashes are equal")
	}
}
