package agent

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"

	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// synth is a synthetic engine prefix cache: it emits vLLM-shaped batches and knows
// the exact key set an agent must end up with.
type synth struct {
	rng      *rand.Rand
	seed     uint64
	bs       int
	blocks   map[uint64]uint64 // engine hash → key
	parent   map[uint64]uint64
	children map[uint64]int
	mapForm  bool
}

func newSynth(model string, bs int, seed uint64) *synth {
	return &synth{rng: rand.New(rand.NewPCG(seed, 7)), seed: kvblock.Seed(model, "", ""), bs: bs,
		blocks: map[uint64]uint64{}, parent: map[uint64]uint64{}, children: map[uint64]int{}}
}

// batch returns one msgpack batch payload of a few stores and removals.
func (s *synth) batch() []byte {
	var events []any
	for range 1 + s.rng.IntN(3) {
		if s.rng.IntN(10) < 7 || len(s.blocks) == 0 {
			events = append(events, s.store())
		} else if ev := s.remove(); ev != nil {
			events = append(events, ev)
		}
	}
	s.mapForm = !s.mapForm
	b, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, events, 0})
	if err != nil {
		panic(err)
	}
	return b
}

func (s *synth) store() any {
	var parentHash uint64
	parentKey := s.seed
	if len(s.blocks) > 0 && s.rng.IntN(3) > 0 {
		for h, k := range s.blocks { // a random cached block
			parentHash, parentKey = h, k
			break
		}
	}
	n := 1 + s.rng.IntN(4)
	hashes := make([]any, n)
	tokens := make([]any, 0, n*s.bs)
	prevHash, prevKey := parentHash, parentKey
	for i := range n {
		blk := make([]uint32, s.bs)
		for j := range blk {
			blk[j] = uint32(s.rng.IntN(5000))
			tokens = append(tokens, blk[j])
		}
		h := s.rng.Uint64() | 1
		key := kvblock.Extend(prevKey, blk)
		s.blocks[h], s.parent[h] = key, prevHash
		if prevHash != 0 {
			s.children[prevHash]++
		}
		hashes[i] = h
		prevHash, prevKey = h, key
	}
	var parent any
	if parentHash != 0 {
		parent = parentHash
	}
	if s.mapForm {
		return map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
			"token_ids": tokens, "block_size": s.bs, "medium": "GPU", "lora_name": nil, "extra_keys": nil}
	}
	return []any{"BlockStored", hashes, parent, tokens, s.bs, nil, "GPU", nil, nil, 0, "full_attention", nil}
}

// remove evicts up to three leaf blocks (like vLLM, never a block a cached child needs).
func (s *synth) remove() any {
	var hs []any
	for h := range s.blocks {
		if s.children[h] == 0 {
			hs = append(hs, h)
			delete(s.blocks, h)
			if p := s.parent[h]; p != 0 {
				s.children[p]--
			}
			delete(s.parent, h)
			if len(hs) == 3 {
				break
			}
		}
	}
	if len(hs) == 0 {
		return nil
	}
	if s.mapForm {
		return map[string]any{"type": "BlockRemoved", "block_hashes": hs, "medium": "GPU"}
	}
	return []any{"BlockRemoved", hs, "GPU"}
}

func (s *synth) keys() []uint64 {
	out := make([]uint64, 0, len(s.blocks))
	for _, k := range s.blocks {
		out = append(out, k)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// converge waits until the agent's mirror and the published view both equal want.
func converge(t *testing.T, a *Agent, v *view, want []uint64) {
	t.Helper()
	eventually(t, "agent mirror == engine cache", func() bool { return slices.Equal(a.Keys(), want) })
	eventually(t, "published view == agent mirror", func() bool { return slices.Equal(v.sorted(), want) })
	v.check(t)
}

func TestAgentEndToEndWithDroppedBatches(t *testing.T) {
	_, nc := startNATS(t)
	e := newFakeEngine(t, "m", 0)
	a, reg, _ := runAgent(t, e, nc, nil)
	v := newView(t, nc, a.ID())
	s := newSynth("m", 4, 1)
	rng := rand.New(rand.NewPCG(2, 3))
	dropped := 0
	for i := range 300 {
		drop := i > 0 && i < 299 && rng.IntN(10) == 0 // 10% dropped on the live stream
		if drop {
			dropped++
		}
		e.send(s.batch(), drop)
	}
	converge(t, a, v, s.keys())
	if got := metricValue(a.met.gaps); got == 0 || dropped == 0 {
		t.Fatalf("gaps %v with %d dropped batches", got, dropped)
	}
	if got := metricValue(a.met.resyncs); got != 0 {
		t.Errorf("resyncs %v, want 0: replay should heal every gap", got)
	}
	names := gatheredNames(t, reg)
	for _, n := range []string{"kvroute_agent_batches_received_total", "kvroute_agent_events_received_total",
		"kvroute_agent_batches_published_total", "kvroute_agent_decode_errors_total", "kvroute_agent_gaps_total",
		"kvroute_agent_replays_total", "kvroute_agent_resyncs_total", "kvroute_agent_orphans_total",
		"kvroute_agent_keys_held", "kvroute_agent_publish_duration_seconds", "kvroute_agent_engine_up"} {
		if !names[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
	t.Logf("%d keys, %d dropped batches, %v replays", len(s.keys()), dropped, metricValue(a.met.replays))
}

func TestAgentGapWithoutReplayStartsNewEpoch(t *testing.T) {
	_, nc := startNATS(t)
	e := newFakeEngine(t, "m", 0)
	a, _, _ := runAgent(t, e, nc, func(c *Config) { c.ReplayEndpoint = "" })
	v := newView(t, nc, a.ID())
	s := newSynth("m", 4, 4)
	for range 20 {
		e.send(s.batch(), false)
	}
	converge(t, a, v, s.keys())
	epoch1, _ := a.Epoch()
	e.send(s.batch(), true) // lost for good
	// After the gap the agent relearns from the live stream only: a fresh chain.
	s2 := newSynth("m", 4, 5)
	s2.blocks = map[uint64]uint64{}
	payload := []any{}
	_ = payload
	e.send(func() []byte {
		b, _ := msgpack.Marshal([]any{1.0, []any{s2.store()}, 0})
		return b
	}(), false)
	converge(t, a, v, s2.keys())
	epoch2, _ := a.Epoch()
	if epoch2 <= epoch1 {
		t.Fatalf("epoch %d after lost history, was %d", epoch2, epoch1)
	}
	if got := metricValue(a.met.resyncs); got != 1 {
		t.Errorf("resyncs %v, want 1", got)
	}
}

func TestAgentEngineRestartNewEpoch(t *testing.T) {
	_, nc := startNATS(t)
	e := newFakeEngine(t, "m", 1) // llm-d style: seq from 1
	a, _, _ := runAgent(t, e, nc, nil)
	v := newView(t, nc, a.ID())
	s := newSynth("m", 8, 6)
	for range 30 {
		e.send(s.batch(), false)
	}
	converge(t, a, v, s.keys())
	epoch1, _ := a.Epoch()
	e.restart(1)
	s = newSynth("m", 8, 7)
	for range 10 {
		e.send(s.batch(), false)
	}
	converge(t, a, v, s.keys())
	if epoch2, seq := a.Epoch(); epoch2 <= epoch1 || seq == 0 {
		t.Fatalf("epoch %d seq %d after engine restart, was epoch %d", epoch2, seq, epoch1)
	}
}

func TestAgentRestartMidStreamResyncs(t *testing.T) {
	_, nc := startNATS(t)
	e := newFakeEngine(t, "m", 0)
	a1, _, stop1 := runAgent(t, e, nc, nil)
	v := newView(t, nc, a1.ID())
	s := newSynth("m", 4, 8)
	for range 40 {
		e.send(s.batch(), false)
	}
	converge(t, a1, v, s.keys())
	epoch1, _ := a1.Epoch()
	stop1()
	for range 40 { // the engine goes on while no agent runs
		e.send(s.batch(), false)
	}
	a2, _, _ := runAgent(t, e, nc, nil)
	for range 20 {
		e.send(s.batch(), false)
	}
	converge(t, a2, v, s.keys())
	if epoch2, _ := a2.Epoch(); epoch2 <= epoch1 {
		t.Fatalf("restarted agent epoch %d ≤ %d", epoch2, epoch1)
	}

	// Without the early history (bounded replay buffer) the agent learns what it can and
	// never guesses: blocks under unknown parents are orphans, not keys.
	e.forget(e.seq - 5)
	a3, _, _ := runAgent(t, e, nc, func(c *Config) { c.InstanceID = "third" })
	for range 20 {
		e.send(s.batch(), false)
	}
	eventually(t, "third agent caught up", func() bool {
		a3.mu.Lock()
		defer a3.mu.Unlock()
		return a3.engSeq == e.seq
	})
	want := map[uint64]bool{}
	for _, k := range s.keys() {
		want[k] = true
	}
	for _, k := range a3.Keys() {
		if !want[k] {
			t.Fatalf("agent without history holds key %x the engine does not have", k)
		}
	}
	if len(a3.Keys()) >= len(s.keys()) {
		t.Logf("note: partial history still covered every key")
	}
}

func TestAgentGarbageFramesSkipped(t *testing.T) {
	_, nc := startNATS(t)
	e := newFakeEngine(t, "m", 0)
	a, _, _ := runAgent(t, e, nc, nil)
	v := newView(t, nc, a.ID())
	s := newSynth("m", 4, 9)
	for range 10 {
		e.send(s.batch(), false)
	}
	vec := loadVectors(t)
	rng := rand.New(rand.NewPCG(1, 1))
	random := make([]byte, 200)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	seq8 := []byte{0, 0, 0, 0, 0, 0, 0, 99}
	e.sendRaw([]byte("kv"), seq8)                                   // wrong frame count
	e.sendRaw([]byte("kv"), []byte{1, 2, 3}, vec["V1"])             // short seq frame
	e.sendRaw([]byte("kv"), seq8, vec["V1"][:len(vec["V1"])/2])     // truncated msgpack
	e.sendRaw([]byte("kv"), seq8, random)                           // random bytes
	e.sendRaw([]byte("kv"), seq8, vec["V2"], []byte("extra frame")) // too many frames
	for range 10 {
		e.send(s.batch(), false)
	}
	converge(t, a, v, s.keys())
	if got := metricValue(a.met.decodeErrors); got != 5 {
		t.Errorf("decode errors %v, want 5", got)
	}
	if got := metricValue(a.met.resyncs); got != 0 {
		t.Errorf("garbage caused %v resyncs", got)
	}
}

func TestAgentCapturedStream(t *testing.T) {
	_, nc := startNATS(t)
	e := newFakeEngine(t, "sim-model", 1)
	a, _, _ := runAgent(t, e, nc, func(c *Config) { c.Model = "sim-model" })
	v := newView(t, nc, a.ID())
	seed := kvblock.Seed("sim-model", "", "")
	tokens := func(m capturedMsg) []uint32 {
		var b Batch
		if err := NewDecoder().Decode(m.frames[2], &b); err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			if ev.Kind == KindBlockStored {
				return slices.Clone(ev.Tokens)
			}
		}
		return nil
	}
	// legacy-array: A (2 blocks), A+suffix (2 more, parent = A's last), B (4 blocks).
	msgs := loadCapture(t, "legacy-array")
	for _, m := range msgs {
		e.send(m.frames[2], false)
	}
	want := kvblock.Keys(nil, seed, append(tokens(msgs[0]), tokens(msgs[1])...), 8)
	want = kvblock.Keys(want, seed, tokens(msgs[2]), 8)
	slices.Sort(want)
	converge(t, a, v, want)
	// legacy-array-evict: stores, removals, AllBlocksCleared, a store after the clear.
	// A new engine process (its seq restarts at 1) → new epoch.
	e.restart(1)
	ev := loadCapture(t, "legacy-array-evict")
	for _, m := range ev {
		e.send(m.frames[2], false)
	}
	want = kvblock.Keys(nil, seed, tokens(ev[4]), 8)
	slices.Sort(want)
	converge(t, a, v, want)
}

func TestAgentHeartbeatAndSnapshot(t *testing.T) {
	_, nc := startNATS(t)
	e := newFakeEngine(t, "m", 0)
	hbs := make(chan *nats.Msg, 64)
	a, _, _ := runAgent(t, e, nc, func(c *Config) { c.InstanceID = "inst-1" })
	sub, err := nc.ChanSubscribe(kvroutev1.SubjectHeartbeat+"inst-1", hbs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	s := newSynth("m", 4, 10)
	for range 200 {
		e.send(s.batch(), false)
	}
	eventually(t, "mirror", func() bool { return slices.Equal(a.Keys(), s.keys()) })
	var hb kvroutev1.Heartbeat
	eventually(t, "heartbeat with keys", func() bool {
		m := <-hbs
		if err := proto.Unmarshal(m.Data, &hb); err != nil {
			t.Fatal(err)
		}
		return hb.KeysHeld == uint64(len(s.keys()))
	})
	d, l := hb.Descriptor_, hb.Load
	if d.Id != "inst-1" || d.Model != "m" || !slices.Equal(d.Adapters, []string{"ad1"}) || d.EngineUrl != e.http.URL || d.BlockSize != 4 {
		t.Errorf("descriptor %v", d)
	}
	if !l.Ok || l.Running != 3 || l.Waiting != 2 || l.KvUsage != 0.25 || l.PrefixCacheHits != 32 || l.PrefixCacheQueries != 113 {
		t.Errorf("load %v", l)
	}
	if epoch, seq := a.Epoch(); hb.Epoch != epoch || hb.LastSeq == 0 || hb.LastSeq > seq {
		t.Errorf("heartbeat epoch/seq %d/%d, agent %d/%d", hb.Epoch, hb.LastSeq, epoch, seq)
	}
	// A view that joins mid-epoch gets the state by a chunked snapshot (100 keys/chunk).
	v := newView(t, nc, "inst-1")
	e.send(s.batch(), false)
	eventually(t, "snapshot view", func() bool { return slices.Equal(v.sorted(), s.keys()) })
	v.check(t)
	if v.snaps == 0 || len(s.keys()) <= 100 {
		t.Fatalf("snapshots %d, keys %d: want a multi-chunk snapshot", v.snaps, len(s.keys()))
	}
	// Wrong instance → an error chunk.
	req, _ := proto.Marshal(&kvroutev1.SnapshotRequest{Instance: "other"})
	m, err := nc.Request(kvroutev1.SubjectSnapshot+"inst-1", req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var c kvroutev1.SnapshotChunk
	if err := proto.Unmarshal(m.Data, &c); err != nil || c.Error == "" || !c.Last {
		t.Fatalf("wrong-instance reply %v %v", &c, err)
	}
}

func TestAgentNATSRestart(t *testing.T) {
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	port := srv.Addr().String()
	url := srv.ClientURL()
	connect := func(name string) *nats.Conn {
		nc, err := natsutil.Connect(natsutil.ClientConfig{URL: url, Name: name, Log: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	agentNC, viewNC := connect("agent"), connect("view")
	e := newFakeEngine(t, "m", 0)
	a, _, _ := runAgent(t, e, agentNC, nil)
	v := newView(t, viewNC, a.ID())
	s := newSynth("m", 4, 11)
	for range 30 {
		e.send(s.batch(), false)
	}
	converge(t, a, v, s.keys())
	srv.Shutdown()
	for range 30 { // the agent keeps mirroring while NATS is away
		e.send(s.batch(), false)
	}
	eventually(t, "mirror while NATS is down", func() bool { return slices.Equal(a.Keys(), s.keys()) })
	srv2 := restartNATS(t, srv, port)
	defer srv2.Shutdown()
	for range 5 {
		e.send(s.batch(), false)
	}
	converge(t, a, v, s.keys())
}

func TestNewRejectsBadInput(t *testing.T) {
	_, nc := startNATS(t)
	cfg := DefaultConfig()
	if _, err := New(cfg, nc, nil, nil); err == nil {
		t.Fatal("empty config accepted")
	}
	cfg.EngineURL, cfg.ZMQEndpoint = "http://127.0.0.1:8000", "tcp://127.0.0.1:5557"
	if _, err := New(cfg, nil, nil, nil); err == nil {
		t.Fatal("nil NATS accepted")
	}
	reg := prometheus.NewRegistry()
	a, err := New(cfg, nc, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() != "127-0-0-1-8000" {
		t.Errorf("derived id %q", a.ID())
	}
	if _, err := New(cfg, nc, reg, nil); err == nil {
		t.Fatal("second agent on the same registry: want a registration error")
	}
}
