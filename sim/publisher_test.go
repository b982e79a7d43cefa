package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvroute/kvroute/kvblock"
)

// frame is one received ZMQ message.
type frame struct {
	topic   string
	seq     uint64
	payload []byte
}

// subscriber collects every message of a sim's PUB socket.
type subscriber struct {
	mu   sync.Mutex
	msgs []frame
}

func subscribe(t *testing.T, endpoint string) *subscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sub := zmq4.NewSub(ctx)
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial(endpoint); err != nil {
		t.Fatal(err)
	}
	s := &subscriber{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := sub.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
				t.Errorf("message with %d frames", len(m.Frames))
				continue
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, frame{string(m.Frames[0]), binary.BigEndian.Uint64(m.Frames[1]), m.Frames[2]})
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); sub.Close(); <-done })
	return s
}

func (s *subscriber) all() []frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// waitSubscribed sends throw-away requests until the subscriber sees a batch, so that
// later batches cannot be lost to the PUB/SUB join race. It returns the next seq.
func waitSubscribed(t *testing.T, s *Server, sub *subscriber) {
	t.Helper()
	i := 0
	eventually(t, "the first batch", func() bool {
		i++
		generate(t, s, seqTokens(90000+i*100, 16), "", "", 1)
		return len(sub.all()) > 0
	})
}

// mirror rebuilds kvblock keys from decoded events, as an agent does.
type mirror struct {
	model string
	keys  map[uint64]uint64 // engine hash → kvblock key
	refs  map[uint64]int
}

func newMirror(model string) *mirror {
	return &mirror{model: model, keys: map[uint64]uint64{}, refs: map[uint64]int{}}
}

func toU64(t *testing.T, v any) uint64 {
	t.Helper()
	switch x := v.(type) {
	case uint64:
		return x
	case uint32:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint8:
		return uint64(x)
	case int64:
		return uint64(x)
	case int32:
		return uint64(x)
	case int16:
		return uint64(x)
	case int8:
		return uint64(x)
	}
	t.Fatalf("not an integer: %T %v", v, v)
	return 0
}

// apply decodes a batch generically and applies it; it understands both forms.
func (m *mirror) apply(t *testing.T, payload []byte) {
	t.Helper()
	var batch []any
	if err := msgpack.Unmarshal(payload, &batch); err != nil {
		t.Fatalf("decode batch: %v", err)
	}
	if len(batch) != 3 {
		t.Fatalf("batch has %d elements, want 3", len(batch))
	}
	for _, raw := range batch[1].([]any) {
		var typ string
		f := map[string]any{}
		switch ev := raw.(type) {
		case map[string]any:
			typ, f = ev["type"].(string), ev
		case []any:
			typ = ev[0].(string)
			names := map[string][]string{
				evStored:  {"", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"},
				evRemoved: {"", "block_hashes", "medium", "group_idx"},
			}[typ]
			for i := 1; i < len(ev) && i < len(names); i++ {
				f[names[i]] = ev[i]
			}
		}
		switch typ {
		case evStored:
			bs := int(toU64(t, f["block_size"]))
			lora, _ := f["lora_name"].(string)
			var parent uint64
			if p := f["parent_block_hash"]; p == nil {
				salt := ""
				if ek, _ := f["extra_keys"].([]any); len(ek) > 0 {
					if first, _ := ek[0].([]any); len(first) > 0 {
						skip := 0
						if lora != "" {
							skip = 1
						}
						if len(first) > skip {
							salt = first[skip].(string)
						}
					}
				}
				parent = kvblock.Seed(m.model, lora, salt)
			} else {
				k, ok := m.keys[toU64(t, p)]
				if !ok {
					t.Fatalf("BlockStored with unknown parent %x", toU64(t, p))
				}
				parent = k
			}
			toks := f["token_ids"].([]any)
			for i, h := range f["block_hashes"].([]any) {
				block := make([]uint32, bs)
				for j := range block {
					block[j] = uint32(toU64(t, toks[i*bs+j]))
				}
				parent = kvblock.Extend(parent, block)
				m.keys[toU64(t, h)] = parent
				m.refs[toU64(t, h)]++
			}
		case evRemoved:
			for _, h := range f["block_hashes"].([]any) {
				hh := toU64(t, h)
				if m.refs[hh]--; m.refs[hh] <= 0 {
					delete(m.keys, hh)
					delete(m.refs, hh)
				}
			}
		case evCleared:
			clear(m.keys)
			clear(m.refs)
		default:
			t.Fatalf("unknown event type %q", typ)
		}
	}
}

func (m *mirror) sorted() []uint64 {
	out := make([]uint64, 0, len(m.keys))
	for _, k := range m.keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// shape describes a decoded msgpack value's structure: Go types, with map keys sorted.
func shape(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		s := "{"
		for _, k := range keys {
			s += k + ":" + shape(x[k]) + ","
		}
		return s + "}"
	case []any:
		s := "["
		for _, e := range x {
			s += shape(e) + ","
		}
		return s + "]"
	case nil:
		return "nil"
	case string:
		return "str"
	case float64:
		return "float64"
	case bool:
		return "bool"
	default:
		if reflect.TypeOf(v).Kind() >= reflect.Int && reflect.TypeOf(v).Kind() <= reflect.Uint64 {
			return "int"
		}
		return fmt.Sprintf("%T", v)
	}
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return v
}

func testEventStream(t *testing.T, format string) {
	cfg := testConfig()
	cfg.KVEventsFormat = format
	cfg.NumGPUBlocks = 24
	cfg.LoRAAdapters = []string{"sql-lora"}
	s := startServer(t, cfg)
	sub := subscribe(t, s.EventsEndpoint())
	waitSubscribed(t, s, sub)
	if err := s.ResetPrefixCache(); err != nil {
		t.Fatal(err)
	}
	// A workload that stores, hits, extends prefixes, salts, uses an adapter, and evicts.
	shared := seqTokens(1, 64)
	for i := range 12 {
		p := append(slices.Clone(shared), seqTokens(1000*(i+1), 40)...)
		lora, salt := "", ""
		if i%3 == 1 {
			lora = "sql-lora"
		}
		if i%4 == 2 {
			salt = fmt.Sprintf("tenant-%d", i)
		}
		generate(t, s, p, lora, salt, 20)
	}
	vec := loadVectors(t)
	goldenStored := decodeAny(t, vec["V1"]).([]any)[1].([]any)[0]
	if format == FormatArray {
		goldenStored = decodeAny(t, vec["V3"]).([]any)[1].([]any)[0]
	}
	goldenRemoved := decodeAny(t, vec["V2"]).([]any)[1].([]any)[0]
	m := newMirror(DefaultModel)
	var prev uint64
	sawStored, sawRemoved, sawCleared := false, false, false
	eventually(t, "the mirror to match the cache", func() bool {
		msgs := sub.all()
		for _, f := range msgs[prev:] {
			m.apply(t, f.payload)
		}
		prev = uint64(len(msgs))
		return slices.Equal(m.sorted(), s.KVBlockKeys())
	})
	msgs := sub.all()
	for i, f := range msgs {
		if f.topic != cfg.KVEventsTopic {
			t.Fatalf("topic %q", f.topic)
		}
		if i > 0 && f.seq != msgs[i-1].seq+1 {
			t.Fatalf("seq %d after %d", f.seq, msgs[i-1].seq)
		}
		batch := decodeAny(t, f.payload).([]any)
		if shape(batch[0]) != "float64" || shape(batch[2]) != "int" {
			t.Fatalf("batch shape %s", shape(batch))
		}
		for _, ev := range batch[1].([]any) {
			var typ string
			if mm, ok := ev.(map[string]any); ok {
				typ = mm["type"].(string)
			} else {
				typ = ev.([]any)[0].(string)
			}
			switch typ {
			case evStored:
				sawStored = true
				// Same field names and types as the golden vector, up to list lengths,
				// nil-vs-value for parent/lora/extra keys.
				if got, want := fieldSet(ev), fieldSet(goldenStored); got != want {
					t.Fatalf("BlockStored fields\n got %s\nwant %s", got, want)
				}
			case evRemoved:
				sawRemoved = true
				if format == FormatMap && shape(ev) != shape(goldenRemoved) {
					t.Fatalf("BlockRemoved shape %s, want %s", shape(ev), shape(goldenRemoved))
				}
			case evCleared:
				sawCleared = true
			}
		}
	}
	if !sawStored || !sawRemoved || !sawCleared {
		t.Fatalf("saw stored=%v removed=%v cleared=%v", sawStored, sawRemoved, sawCleared)
	}
}

// fieldSet is an event's field names (map form) or length (array form) with the types
// of the fields whose type never varies.
func fieldSet(ev any) string {
	switch x := ev.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k, v := range x {
			switch k {
			case "type", "medium", "kv_cache_spec_kind", "block_size", "group_idx":
				keys = append(keys, k+"="+shape(v))
			default:
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		return fmt.Sprint(keys)
	case []any:
		return fmt.Sprintf("array(%d) %s %s %s", len(x), shape(x[0]), shape(x[4]), shape(x[6]))
	}
	return "?"
}

func TestEventStreamMapForm(t *testing.T)   { testEventStream(t, FormatMap) }
func TestEventStreamArrayForm(t *testing.T) { testEventStream(t, FormatArray) }

func TestReplay(t *testing.T) {
	cfg := testConfig()
	cfg.KVEventsBufferSteps = 5
	s := startServer(t, cfg)
	for i := range 8 {
		generate(t, s, seqTokens(100*i+1, 32), "", "", 1) // one batch each
	}
	replay := func(start uint64) []frame {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d := zmq4.NewDealer(ctx)
		defer d.Close()
		if err := d.Dial(s.ReplayEndpoint()); err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], start)
		if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, b[:])); err != nil {
			t.Fatal(err)
		}
		var out []frame
		for {
			m, err := d.Recv()
			if err != nil {
				t.Fatalf("replay recv: %v", err)
			}
			if len(m.Frames) != 4 || len(m.Frames[0]) != 0 || len(m.Frames[2]) != 8 {
				t.Fatalf("replay reply frames: %q", m.Frames)
			}
			f := frame{string(m.Frames[1]), binary.BigEndian.Uint64(m.Frames[2]), m.Frames[3]}
			if f.seq == endOfReplaySeq {
				if f.topic != "" || len(f.payload) != 0 {
					t.Fatalf("end marker with topic %q payload %d bytes", f.topic, len(f.payload))
				}
				return out
			}
			out = append(out, f)
		}
	}
	got := replay(5)
	if len(got) != 3 || got[0].seq != 5 || got[2].seq != 7 || got[0].topic != "kv" {
		t.Fatalf("replay from 5: %+v", got)
	}
	for _, f := range got {
		decodeAny(t, f.payload)
	}
	// Only the last 5 batches (3..7) are kept: asking for 0 starts at 3, and the
	// client sees the gap.
	if got := replay(0); len(got) != 5 || got[0].seq != 3 {
		t.Fatalf("replay from 0: first %d of %d", got[0].seq, len(got))
	}
	if got := replay(100); len(got) != 0 {
		t.Fatalf("replay from the future: %d batches", len(got))
	}
}
