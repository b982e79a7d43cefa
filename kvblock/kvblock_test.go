package kvblock

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from the current code")

// referenceKeys is a deliberately naive second implementation of the scheme: it builds
// the hash input as one byte slice per block, exactly as the package comment describes.
func referenceKeys(seed uint64, tokens []uint32, blockSize int) []uint64 {
	var out []uint64
	parent := seed
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		in := binary.LittleEndian.AppendUint64(nil, parent)
		for _, t := range tokens[i : i+blockSize] {
			in = binary.LittleEndian.AppendUint32(in, t)
		}
		parent = xxhash.Sum64(in)
		out = append(out, parent)
	}
	return out
}

func referenceSeed(model, adapter, salt string) uint64 {
	in := []byte(seedDomain)
	for _, s := range []string{model, adapter, salt} {
		in = binary.LittleEndian.AppendUint32(in, uint32(len(s)))
		in = append(in, s...)
	}
	return xxhash.Sum64(in)
}

type vector struct {
	Name      string   `json:"name"`
	Model     string   `json:"model"`
	Adapter   string   `json:"adapter"`
	CacheSalt string   `json:"cache_salt"`
	BlockSize int      `json:"block_size"`
	Tokens    []uint32 `json:"tokens"`
	Seed      string   `json:"seed"` // hex, so JSON readers in any language keep all 64 bits
	Keys      []string `json:"keys"`
}

type vectorFile struct {
	SchemeVersion int      `json:"scheme_version"`
	Vectors       []vector `json:"vectors"`
}

func hex64(v uint64) string { return "0x" + fmtHex(v) }

func fmtHex(v uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b[:])
}

func seqTokens(n int, start uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = start + uint32(i)
	}
	return t
}

func goldenInputs() []vector {
	return []vector{
		{Name: "vllm-spec-tokens-1..8-bs4", Model: "Qwen/Qwen3-0.6B", BlockSize: 4, Tokens: seqTokens(8, 1)},
		{Name: "partial-last-block", Model: "Qwen/Qwen3-0.6B", BlockSize: 4, Tokens: seqTokens(10, 1)},
		{Name: "salted", Model: "Qwen/Qwen3-0.6B", CacheSalt: "tenant-a", BlockSize: 4, Tokens: seqTokens(8, 1)},
		{Name: "adapter", Model: "Qwen/Qwen3-0.6B", Adapter: "sql-lora", BlockSize: 4, Tokens: seqTokens(8, 1)},
		{Name: "bs16-large-ids", Model: "meta-llama/Llama-3.1-8B-Instruct", BlockSize: 16, Tokens: seqTokens(48, 128000)},
		{Name: "bs1", Model: "m", BlockSize: 1, Tokens: []uint32{0, 1, 0xffffffff}},
		{Name: "empty", Model: "m", BlockSize: 16, Tokens: nil},
	}
}

func TestGoldenVectors(t *testing.T) {
	path := "testdata/vectors.json"
	if *update {
		f := vectorFile{SchemeVersion: SchemeVersion}
		for _, v := range goldenInputs() {
			seed := Seed(v.Model, v.Adapter, v.CacheSalt)
			v.Seed = hex64(seed)
			v.Keys = []string{}
			for _, k := range Keys(nil, seed, v.Tokens, v.BlockSize) {
				v.Keys = append(v.Keys, hex64(k))
			}
			f.Vectors = append(f.Vectors, v)
		}
		b, _ := json.MarshalIndent(f, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.SchemeVersion != SchemeVersion {
		t.Fatalf("vectors are for scheme %d, code is scheme %d", f.SchemeVersion, SchemeVersion)
	}
	if len(f.Vectors) < 7 {
		t.Fatalf("only %d vectors", len(f.Vectors))
	}
	for _, v := range f.Vectors {
		seed := Seed(v.Model, v.Adapter, v.CacheSalt)
		if got := hex64(seed); got != v.Seed {
			t.Errorf("%s: seed %s, golden %s", v.Name, got, v.Seed)
		}
		if ref := hex64(referenceSeed(v.Model, v.Adapter, v.CacheSalt)); ref != v.Seed {
			t.Errorf("%s: reference seed %s, golden %s", v.Name, ref, v.Seed)
		}
		var got, ref []string
		for _, k := range Keys(nil, seed, v.Tokens, v.BlockSize) {
			got = append(got, hex64(k))
		}
		for _, k := range referenceKeys(seed, v.Tokens, v.BlockSize) {
			ref = append(ref, hex64(k))
		}
		if !slices.Equal(got, v.Keys) && !(len(got) == 0 && len(v.Keys) == 0) {
			t.Errorf("%s: keys %v, golden %v", v.Name, got, v.Keys)
		}
		if !slices.Equal(ref, v.Keys) && !(len(ref) == 0 && len(v.Keys) == 0) {
			t.Errorf("%s: reference keys %v, golden %v", v.Name, ref, v.Keys)
		}
		if want := len(v.Tokens) / v.BlockSize; len(v.Keys) != want {
			t.Errorf("%s: %d golden keys for %d tokens at block size %d", v.Name, len(v.Keys), len(v.Tokens), v.BlockSize)
		}
	}
}

func TestPrefixYieldsKeyPrefix(t *testing.T) {
	tokens := seqTokens(1000, 7)
	seed := Seed("m", "", "")
	for bs := 1; bs <= 256; bs++ {
		full := Keys(nil, seed, tokens, bs)
		if len(full) != len(tokens)/bs {
			t.Fatalf("bs %d: %d keys for %d tokens", bs, len(full), len(tokens))
		}
		if !slices.Equal(full, referenceKeys(seed, tokens, bs)) {
			t.Fatalf("bs %d: differs from the reference implementation", bs)
		}
		for _, n := range []int{0, bs - 1, bs, 3*bs + 1, len(tokens) / 2} {
			if n > len(tokens) {
				continue
			}
			part := Keys(nil, seed, tokens[:n], bs)
			if !slices.Equal(part, full[:len(part)]) {
				t.Fatalf("bs %d n %d: keys of a token prefix are not a prefix of the keys", bs, n)
			}
			if len(part) != n/bs {
				t.Fatalf("bs %d n %d: partial last block produced a key (%d keys)", bs, n, len(part))
			}
		}
	}
}

func TestChainEqualsExtend(t *testing.T) {
	tokens := seqTokens(64, 100)
	seed := Seed("m", "a", "s")
	keys := Keys(nil, seed, tokens, 16)
	parent := seed
	for i, k := range keys {
		parent = Extend(parent, tokens[i*16:(i+1)*16])
		if parent != k {
			t.Fatalf("block %d: Extend chain %x != Keys %x", i, parent, k)
		}
	}
	// Extend takes the long path above smallBlock and must agree with the reference.
	big := seqTokens(300, 1)
	if got, want := Extend(seed, big), referenceKeys(seed, big, 300)[0]; got != want {
		t.Fatalf("Extend of a 300-token block %x, reference %x", got, want)
	}
	if got, want := Keys(nil, seed, big, 300)[0], referenceKeys(seed, big, 300)[0]; got != want {
		t.Fatalf("Keys with a 300-token block %x, reference %x", got, want)
	}
}

func TestSeedsSeparateTenantsAndAdapters(t *testing.T) {
	tokens := seqTokens(256, 1)
	seeds := map[string]uint64{
		"base":         Seed("m", "", ""),
		"salt-a":       Seed("m", "", "a"),
		"salt-b":       Seed("m", "", "b"),
		"adapter":      Seed("m", "lora1", ""),
		"adapter-salt": Seed("m", "lora1", "a"),
		"other-model":  Seed("m2", "", ""),
		"shifted":      Seed("ma", "", ""), // ("ma","") must differ from ("m","a")
		"shifted2":     Seed("m", "a", ""),
	}
	seen := map[uint64]string{}
	for name, s := range seeds {
		for _, k := range Keys(nil, s, tokens, 16) {
			if other, dup := seen[k]; dup {
				t.Fatalf("key %x shared by %s and %s", k, name, other)
			}
			seen[k] = name
		}
	}
}

func TestKeysAppendsWithoutAllocating(t *testing.T) {
	tokens := seqTokens(8192, 1)
	dst := make([]uint64, 1, 1+512)
	dst[0] = 42
	allocs := testing.AllocsPerRun(100, func() {
		dst = Keys(dst[:1], 1, tokens, 16)
	})
	if allocs != 0 {
		t.Fatalf("Keys allocated %.1f times with room in dst", allocs)
	}
	if dst[0] != 42 || len(dst) != 513 {
		t.Fatalf("Keys must append: dst[0]=%d len=%d", dst[0], len(dst))
	}
}

func TestKeysPanicsOnBadBlockSize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("block size 0 did not panic")
		}
	}()
	Keys(nil, 1, []uint32{1}, 0)
}

func TestNumBlocks(t *testing.T) {
	for _, c := range []struct{ n, bs, want int }{{0, 16, 0}, {15, 16, 0}, {16, 16, 1}, {8192, 16, 512}, {5, 0, 0}} {
		if got := NumBlocks(c.n, c.bs); got != c.want {
			t.Errorf("NumBlocks(%d,%d)=%d want %d", c.n, c.bs, got, c.want)
		}
	}
}

func FuzzKeys(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(1), "m", "", "")
	f.Add(make([]byte, 4*64), uint8(16), "Qwen/Qwen3-0.6B", "lora", "salt")
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, model, adapter, salt string) {
		if bs == 0 {
			return
		}
		tokens := make([]uint32, len(raw)/4)
		for i := range tokens {
			tokens[i] = binary.LittleEndian.Uint32(raw[i*4:])
		}
		seed := Seed(model, adapter, salt)
		if seed != referenceSeed(model, adapter, salt) {
			t.Fatal("seed differs from the reference")
		}
		got := Keys(nil, seed, tokens, int(bs))
		if !slices.Equal(got, referenceKeys(seed, tokens, int(bs))) {
			t.Fatal("keys differ from the reference")
		}
		if len(got) != len(tokens)/int(bs) {
			t.Fatal("wrong key count")
		}
	})
}
