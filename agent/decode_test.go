package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// vectorsDir holds vLLM's wire formats with golden bytes (a copy of the shared spec data).
const vectorsDir = "../testdata/vllm-kv-events"

func vectorsPath(t testing.TB, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{vectorsDir}, parts...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("golden vectors missing: %v", err)
	}
	return p
}

func loadVectors(t testing.TB) map[string][]byte {
	t.Helper()
	raw, err := os.ReadFile(vectorsPath(t, "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var hexes map[string]string
	if err := json.Unmarshal(raw, &hexes); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for k, h := range hexes {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out[k] = b
	}
	return out
}

func TestDecodeVectors(t *testing.T) {
	vec := loadVectors(t)
	tok18 := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	const h0, h1 = uint64(0x84b146b151d55111), uint64(0xd43b57df56b58fb1)
	want := map[string]Batch{
		"V1": {HasDPRank: true, Events: []Event{{Kind: KindBlockStored, Hashes: []uint64{h0, h1},
			Tokens: tok18, BlockSize: 4, ExtraFrom: -1}}},
		"V2": {HasDPRank: true, Events: []Event{
			{Kind: KindBlockRemoved, Hashes: []uint64{h1}, ExtraFrom: -1},
			{Kind: KindAllBlocksCleared, ExtraFrom: -1}}},
		"V3": {HasDPRank: true, Events: []Event{{Kind: KindBlockStored, Hashes: []uint64{h1}, Parent: h0, HasParent: true,
			Tokens: tok18[4:], BlockSize: 4, ExtraFrom: -1}}},
		"V3min":   {Events: []Event{{Kind: KindBlockStored, Hashes: []uint64{h0}, Tokens: tok18[:4], BlockSize: 4, ExtraFrom: -1}}},
		"V4bytes": {HasDPRank: true, Events: []Event{{Kind: KindBlockRemoved, Hashes: []uint64{h1}, ExtraFrom: -1}}},
	}
	if len(vec) != len(want) {
		t.Fatalf("vectors.json has %d vectors, the test knows %d: cover the new ones", len(vec), len(want))
	}
	d := NewDecoder()
	for name, payload := range vec {
		var got Batch
		if err := d.Decode(payload, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Time < 1.7e9 || got.Time > 2e9 {
			t.Errorf("%s: ts %v, want a 2024-era unix time", name, got.Time)
		}
		got.Time = 0
		if diff := diffBatch(&got, ptr(want[name])); diff != "" {
			t.Errorf("%s: %s", name, diff)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func diffBatch(got, want *Batch) string {
	if got.HasDPRank != want.HasDPRank || got.DPRank != want.DPRank {
		return fmt.Sprintf("dp rank %v/%v, want %v/%v", got.DPRank, got.HasDPRank, want.DPRank, want.HasDPRank)
	}
	if len(got.Events) != len(want.Events) {
		return fmt.Sprintf("%d events, want %d", len(got.Events), len(want.Events))
	}
	for i := range got.Events {
		g, w := got.Events[i], want.Events[i]
		g.extras, w.extras = nil, nil
		if g.Kind != w.Kind || !slices.Equal(g.Hashes, w.Hashes) || g.Parent != w.Parent || g.HasParent != w.HasParent ||
			!slices.Equal(g.Tokens, w.Tokens) || g.BlockSize != w.BlockSize || g.LoRAName != w.LoRAName ||
			g.Medium != w.Medium || g.Group != w.Group || g.Salt != w.Salt || g.ExtraFrom != w.ExtraFrom {
			return fmt.Sprintf("event %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	return ""
}

func TestDecodeHashesJSONBytesForm(t *testing.T) {
	raw, err := os.ReadFile(vectorsPath(t, "hashes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var hs map[string][2]json.RawMessage
	if err := json.Unmarshal(raw, &hs); err != nil {
		t.Fatal(err)
	}
	d := NewDecoder()
	for name, pair := range hs {
		var digestHex string
		if err := json.Unmarshal(pair[0], &digestHex); err != nil {
			t.Fatal(err)
		}
		wantWire, err := strconv.ParseUint(string(pair[1]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		digest, _ := hex.DecodeString(digestHex)
		// The bytes form: a BlockRemoved carrying the 32-byte digest; the int form: the wire value.
		for _, h := range []any{digest, wantWire, int64(wantWire)} {
			payload, err := msgpack.Marshal([]any{1.0, []any{[]any{"BlockRemoved", []any{h}, "GPU"}}, 0})
			if err != nil {
				t.Fatal(err)
			}
			var b Batch
			if err := d.Decode(payload, &b); err != nil {
				t.Fatalf("%s %T: %v", name, h, err)
			}
			if got := b.Events[0].Hashes[0]; got != wantWire {
				t.Errorf("%s %T: hash %d, want %d", name, h, got, wantWire)
			}
		}
	}
}

// capturedMsg is one message of an llm-d simulator capture.
type capturedMsg struct {
	seq     uint64
	frames  [][]byte
	jsonDoc string // the capture's "msgpack as JSON" line
}

func loadCapture(t testing.TB, dir string) []capturedMsg {
	t.Helper()
	f, err := os.Open(vectorsPath(t, "llmd-sim", dir, "zmqsub.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The capture's hex dumps are the source; the .bin files, where present, must match them.
	var out []capturedMsg
	var cur *capturedMsg
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "=== message "):
			out = append(out, capturedMsg{})
			cur = &out[len(out)-1]
		case strings.HasPrefix(line, "--- frame ") && cur != nil:
			cur.frames = append(cur.frames, []byte{})
		case strings.HasPrefix(line, "msgpack as JSON: ") && cur != nil:
			cur.jsonDoc = strings.TrimPrefix(line, "msgpack as JSON: ")
		case len(line) > 10 && cur != nil && len(cur.frames) > 0 && isHexOffset(line[:8]):
			body := line[8:]
			if i := strings.IndexByte(body, '|'); i >= 0 {
				body = body[:i]
			}
			b, err := hex.DecodeString(strings.ReplaceAll(body, " ", ""))
			if err != nil {
				t.Fatalf("%s: hex line %q: %v", dir, line, err)
			}
			k := len(cur.frames) - 1
			cur.frames[k] = append(cur.frames[k], b...)
		}
	}
	for i := range out {
		m := &out[i]
		if len(m.frames) == 3 && len(m.frames[1]) == 8 {
			m.seq = binary.BigEndian.Uint64(m.frames[1])
		}
		for k := range m.frames {
			bin, err := os.ReadFile(filepath.Join(vectorsDir, "llmd-sim", dir, fmt.Sprintf("msg%03d.frame%d.bin", i+1, k)))
			if err == nil && !bytes.Equal(bin, m.frames[k]) {
				t.Fatalf("%s msg %d frame %d: .bin differs from the hex dump", dir, i+1, k)
			}
		}
	}
	return out
}

func isHexOffset(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// expectFromJSON builds the expected batch from the capture's JSON rendering.
func expectFromJSON(t *testing.T, doc string) *Batch {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var top []any
	if err := dec.Decode(&top); err != nil {
		t.Fatal(err)
	}
	u64 := func(v any) uint64 {
		n, err := strconv.ParseUint(string(v.(json.Number)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	b := &Batch{}
	if len(top) > 2 && top[2] != nil {
		b.DPRank, b.HasDPRank = int(u64(top[2])), true
	}
	for _, raw := range top[1].([]any) {
		e := Event{ExtraFrom: -1}
		fields := map[string]any{}
		switch ev := raw.(type) {
		case map[string]any:
			fields = ev
		case []any:
			names := map[string][]string{
				"BlockStored":  {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx"},
				"BlockRemoved": {"type", "block_hashes", "medium", "group_idx"},
			}[ev[0].(string)]
			fields["type"] = ev[0]
			for i := 1; i < len(ev) && i < len(names); i++ {
				fields[names[i]] = ev[i]
			}
		}
		switch fields["type"] {
		case "BlockStored":
			e.Kind = KindBlockStored
		case "BlockRemoved":
			e.Kind = KindBlockRemoved
		case "AllBlocksCleared":
			e.Kind = KindAllBlocksCleared
		}
		if hs, ok := fields["block_hashes"].([]any); ok {
			for _, h := range hs {
				e.Hashes = append(e.Hashes, u64(h))
			}
		}
		if p, ok := fields["parent_block_hash"]; ok && p != nil {
			e.Parent, e.HasParent = u64(p), true
		}
		if ts, ok := fields["token_ids"].([]any); ok {
			for _, tk := range ts {
				e.Tokens = append(e.Tokens, uint32(u64(tk)))
			}
		}
		if bs, ok := fields["block_size"]; ok && bs != nil {
			e.BlockSize = int(u64(bs))
		}
		if m, ok := fields["medium"].(string); ok && m != "GPU" {
			e.Medium = MediumOther
		}
		b.Events = append(b.Events, e)
	}
	return b
}

func TestDecodeLLMDCaptures(t *testing.T) {
	d := NewDecoder()
	total := 0
	for _, dir := range []string{"legacy-array", "legacy-array-evict", "map-format", "replay"} {
		msgs := loadCapture(t, dir)
		if len(msgs) == 0 {
			t.Fatalf("%s: no messages", dir)
		}
		for i, m := range msgs {
			seq, payload, err := splitLive(m.frames)
			if err != nil {
				t.Fatalf("%s msg %d: %v", dir, i+1, err)
			}
			if seq != m.seq || seq != uint64(i+1) {
				t.Errorf("%s msg %d: seq %d, capture says %d", dir, i+1, seq, m.seq)
			}
			var got Batch
			if err := d.Decode(payload, &got); err != nil {
				t.Fatalf("%s msg %d: %v", dir, i+1, err)
			}
			got.Time = 0
			if diff := diffBatch(&got, expectFromJSON(t, m.jsonDoc)); diff != "" {
				t.Errorf("%s msg %d: %s", dir, i+1, diff)
			}
			total++
		}
	}
	if total != 15 {
		t.Errorf("decoded %d captured messages, want 15", total)
	}
}

func TestDecodeReplayCapture(t *testing.T) {
	raw, err := os.ReadFile(vectorsPath(t, "llmd-sim", "replay", "replay.txt"))
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder()
	var seqs []uint64
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "topic=") {
			continue
		}
		var topic, payloadHex string
		var seq uint64
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "topic":
				topic = strings.Trim(v, `"`)
			case "seq":
				seq, _ = strconv.ParseUint(v, 10, 64)
			case "payload":
				payloadHex = v
			}
		}
		payload, _ := hex.DecodeString(payloadHex)
		seq8 := binary.BigEndian.AppendUint64(nil, seq)
		// The capture is the new 4-frame form; the old 3-frame form drops the topic.
		for _, frames := range [][][]byte{{{}, []byte(topic), seq8, payload}, {{}, seq8, payload}} {
			gotSeq, gotPayload, end, err := splitReplay(frames)
			if err != nil {
				t.Fatal(err)
			}
			if gotSeq != seq || end != (seq == math.MaxUint64) {
				t.Fatalf("seq %d end %v, want %d", gotSeq, end, seq)
			}
			if end {
				continue
			}
			var b Batch
			if err := d.Decode(gotPayload, &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 1 || b.Events[0].Kind != KindBlockStored || len(b.Events[0].Tokens) != 8 {
				t.Fatalf("replayed batch %d: %+v", seq, b)
			}
		}
		seqs = append(seqs, seq)
	}
	if !slices.Equal(seqs, []uint64{1, 2, math.MaxUint64}) {
		t.Fatalf("replay seqs %v", seqs)
	}
}

// TestDecodeForms covers the forms the captures do not: a map batch, every integer width,
// negative (signed) hashes, extra_keys with LoRA, salt and multimodal items, non-GPU
// media, group_idx, unknown fields, positions and event types.
func TestDecodeForms(t *testing.T) {
	d := NewDecoder()
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name    string
		payload []byte
		want    Batch
	}{
		{"map batch", enc(map[string]any{"ts": 1.5, "events": []any{[]any{"AllBlocksCleared"}}, "data_parallel_rank": 3, "new": "x"}),
			Batch{Time: 1.5, DPRank: 3, HasDPRank: true, Events: []Event{{Kind: KindAllBlocksCleared, ExtraFrom: -1}}}},
		{"int widths and signed", enc([]any{int64(7), []any{[]any{"BlockRemoved",
			[]any{int8(5), uint8(200), int16(-2), uint16(60000), int32(-70000), uint32(4e9), int64(math.MinInt64), uint64(math.MaxUint64)}, nil}}, nil}),
			Batch{Time: 7, Events: []Event{{Kind: KindBlockRemoved, ExtraFrom: -1, Hashes: []uint64{5, 200,
				math.MaxUint64 - 1, 60000, uint64(1<<64 - 70000), 4e9, 1 << 63, math.MaxUint64}}}}},
		{"lora salt group unknowns", enc([]any{1.0, []any{
			map[string]any{"type": "BlockStored", "extra_keys": []any{[]any{"ad1", "s3cret"}, []any{"ad1"}}, "lora_name": "ad1",
				"block_hashes": []any{1, 2}, "parent_block_hash": nil, "token_ids": []any{1, 2, 3, 4}, "block_size": 2,
				"group_idx": 1, "locality": "x", "session_id": []any{1, 2}},
			[]any{"FutureEvent", 1, 2, 3},
			[]any{"BlockRemoved", []any{9}, "CPU", 2, "future"},
		}, 0, "future"}),
			Batch{Time: 1, HasDPRank: true, Events: []Event{
				{Kind: KindBlockStored, Hashes: []uint64{1, 2}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, LoRAName: "ad1",
					Salt: "s3cret", Group: 1, ExtraFrom: -1},
				{Kind: KindUnknown, ExtraFrom: -1},
				{Kind: KindBlockRemoved, Hashes: []uint64{9}, Medium: MediumCPU, Group: 2, ExtraFrom: -1}}}},
		{"multimodal", enc([]any{1.0, []any{
			[]any{"BlockStored", []any{1, 2, 3}, 77, []any{1, 2, 3}, 1, nil, "GPU", nil,
				[]any{nil, []any{"mmhash", []any{"mm2", 0}}, nil}, nil, "full_attention", nil}}}),
			Batch{Time: 1, Events: []Event{{Kind: KindBlockStored, Hashes: []uint64{1, 2, 3}, Parent: 77, HasParent: true,
				Tokens: []uint32{1, 2, 3}, BlockSize: 1, ExtraFrom: 1}}}},
		{"first block mm and salt", enc([]any{1.0, []any{
			[]any{"BlockStored", []any{1}, nil, []any{1}, 1, nil, "GPU", nil, []any{[]any{"mm", "salt"}}}}}),
			Batch{Time: 1, Events: []Event{{Kind: KindBlockStored, Hashes: []uint64{1}, Tokens: []uint32{1}, BlockSize: 1, ExtraFrom: 0}}}},
	}
	for _, c := range cases {
		var got Batch
		if err := d.Decode(c.payload, &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.Time != c.want.Time {
			t.Errorf("%s: ts %v want %v", c.name, got.Time, c.want.Time)
		}
		if diff := diffBatch(&got, &c.want); diff != "" {
			t.Errorf("%s: %s", c.name, diff)
		}
	}
}

// TestDecodeGarbage: malformed payloads are errors wrapping ErrDecode, never panics.
func TestDecodeGarbage(t *testing.T) {
	vec := loadVectors(t)
	d := NewDecoder()
	bad := map[string][]byte{
		"empty":        {},
		"nil":          {0xc0},
		"one element":  {0x91, 0x01},
		"truncated V1": vec["V1"][:len(vec["V1"])/2],
		"trailing":     append(slices.Clone(vec["V3"]), 0x00),
		"string batch": {0xa3, 'a', 'b', 'c'},
		"huge array":   {0x93, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"float hash":   mustMarshal(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}}),
		"neg token":    mustMarshal(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1}}}),
		"deep nesting": append([]byte{0x93, 0x00, 0x91, 0x92, 0xa1, 'X'}, bytes.Repeat([]byte{0x91}, 100000)...),
	}
	for name, p := range bad {
		var b Batch
		err := d.Decode(p, &b)
		if !errors.Is(err, ErrDecode) {
			t.Errorf("%s: err %v, want ErrDecode", name, err)
		}
	}
	// The decoder still works after garbage.
	var b Batch
	if err := d.Decode(vec["V1"], &b); err != nil || len(b.Events) != 1 {
		t.Fatalf("after garbage: %v %+v", err, b)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecode(f *testing.F) {
	for _, p := range loadVectors(f) {
		f.Add(p)
	}
	for _, dir := range []string{"legacy-array", "legacy-array-evict", "map-format"} {
		for _, m := range loadCapture(f, dir) {
			f.Add(m.frames[2])
		}
	}
	d := NewDecoder()
	m := newMirror("m", 4)
	var b Batch
	f.Fuzz(func(t *testing.T, payload []byte) {
		if err := d.Decode(payload, &b); err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error %v does not wrap ErrDecode", err)
			}
			return
		}
		// Whatever decodes must apply without panicking and keep the mirror consistent.
		var st ApplyStats
		m.Apply(&b, 0, &st)
		present := 0
		m.keys.each(func(k uint64, ks *keyState) {
			switch {
			case ks.refs < 0:
				t.Fatalf("key %x count %d", k, ks.refs)
			case ks.refs == 0 && ks.win == winUntouched:
				t.Fatalf("absent key %x kept outside a change window", k)
			case ks.refs > 0:
				present++
			}
		})
		if present != m.numKeys() {
			t.Fatalf("%d keys present, mirror counts %d", present, m.numKeys())
		}
	})
}
