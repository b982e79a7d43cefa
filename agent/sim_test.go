package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// This file runs the agent against the real simulator (package sim): its engine loop,
// its ZMQ PUB and replay ROUTER, its HTTP API and its fault injection, with the agent
// publishing to a real in-process NATS server and a view (harness_test.go) applying
// what it publishes. The oracle is sim.KVBlockKeys(): the keys of every block in the
// simulator's GPU prefix cache.

const simAdapter = "ad1"

// startSim starts a simulator at bookkeeping speed (time scale 0) with a small cache,
// one LoRA adapter and a fixed seed; mod adjusts the config. tok may be nil (token-id
// prompts only).
func startSim(t testing.TB, tok tokenizer.Tokenizer, mod func(*sim.Config)) *sim.Server {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	cfg.Seed = 1
	cfg.NumGPUBlocks = 64
	cfg.LoRAAdapters = []string{simAdapter}
	if mod != nil {
		mod(&cfg)
	}
	s, err := sim.New(cfg, tok, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// startSimAgent runs an agent on s (dialling its PUB, with its replay socket if it has
// one) and waits until a live batch reaches it, so nothing the test sends afterwards is
// lost to ZMQ's subscription start-up.
func startSimAgent(t testing.TB, s *sim.Server, nc *nats.Conn, mod func(*Config)) (*Agent, func()) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.EngineURL = s.URL()
	cfg.ZMQEndpoint = s.EventsEndpoint()
	cfg.ReplayEndpoint = s.ReplayEndpoint()
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.MinResyncInterval = 0
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg, nc, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { stopOnce(t, cancel, done) }) }
	t.Cleanup(stop)
	waitLive(t, s, a)
	return a, stop
}

// probes numbers the probe prompts of waitLive across a test binary run.
var probes struct {
	sync.Mutex
	n int
}

// waitLive sends one-block probe prompts until a live batch (not a replayed one) reaches
// the agent: then the engine's PUB is connected and has the agent's subscription.
func waitLive(t testing.TB, s *sim.Server, a *Agent) {
	t.Helper()
	model := s.Config().Model
	deadline := time.Now().Add(20 * time.Second)
	for {
		probes.Lock()
		probes.n++
		n := probes.n
		probes.Unlock()
		prompt := make([]uint32, 2*s.Config().BlockSize)
		for i := range prompt {
			prompt[i] = uint32(90000 + n*7 + i)
		}
		before := a.live.Load()
		complete(t, s, model, prompt, "", 1)
		wait := time.Now().Add(time.Second)
		for time.Now().Before(wait) {
			if a.live.Load() > before {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never received a live batch from the simulator")
		}
	}
}

// complete sends one completion with token-id prompt over HTTP and waits for it.
func complete(t testing.TB, s *sim.Server, model string, prompt []uint32, salt string, maxTokens int) {
	t.Helper()
	req := map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens}
	if salt != "" {
		req["cache_salt"] = salt
	}
	postJSON(t, s.URL()+"/v1/completions", req)
}

func postJSON(t testing.TB, url string, body any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", url, resp.StatusCode, msg)
	}
}

// workload sends n requests sharing prefixes in a few families (so stored blocks chain
// from cached parents across batches), on the base model and the adapter, some with a
// cache salt.
type workload struct {
	rng   *rand.Rand
	model string
	bs    int
	fresh int // counter of never-seen prefixes
}

func newWorkload(s *sim.Server, seed uint64) *workload {
	return &workload{rng: rand.New(rand.NewPCG(seed, 99)), model: s.Config().Model, bs: s.Config().BlockSize}
}

func (w *workload) run(t testing.TB, s *sim.Server, n int) {
	t.Helper()
	for range n {
		fam := w.rng.IntN(6)
		model, salt := w.model, ""
		switch w.rng.IntN(6) {
		case 0:
			model = simAdapter
		case 1:
			salt = "salt-1"
		}
		prompt := make([]uint32, 0, 8*w.bs)
		for i := range 2 * w.bs { // the family's shared prefix
			prompt = append(prompt, uint32(1000*(fam+1)+i))
		}
		tail := w.rng.IntN(4 * w.bs)
		variant := w.rng.IntN(8)
		for i := range tail {
			prompt = append(prompt, uint32(20000+variant*100+i))
		}
		complete(t, s, model, prompt, salt, 1+w.rng.IntN(3))
	}
}

// turnover sends enough requests with never-seen prompts (no cached prefix, no salt) to
// evict every block cached before: afterwards the engine's cache holds only blocks an
// agent that missed the past can know.
func (w *workload) turnover(t testing.TB, s *sim.Server) {
	t.Helper()
	need := s.Config().NumGPUBlocks + 8
	for stored := 0; stored < need; {
		w.fresh++
		prompt := make([]uint32, 4*w.bs)
		for i := range prompt {
			prompt[i] = uint32(40000 + w.fresh*100 + i)
		}
		complete(t, s, w.model, prompt, "", 1)
		stored += len(prompt) / w.bs
	}
}

// simConverge waits until the agent's mirror and the published view both equal the
// simulator's cache, and that the view saw no protocol violation.
func simConverge(t testing.TB, s *sim.Server, a *Agent, v *view) {
	t.Helper()
	eventuallyOr(t, "agent mirror == sim cache", func() bool { return slices.Equal(a.Keys(), s.KVBlockKeys()) }, func() {
		t.Logf("agent holds %d keys, sim %d; batches %v, gaps %v, resyncs %v, orphans %v, decode errors %v",
			len(a.Keys()), len(s.KVBlockKeys()), metricValue(a.met.batchesReceived), metricValue(a.met.gaps),
			metricValue(a.met.resyncs), metricValue(a.met.orphans), metricValue(a.met.decodeErrors))
	})
	eventually(t, "published view == sim cache", func() bool { return slices.Equal(v.sorted(), s.KVBlockKeys()) })
	v.check(t)
}

func setFaults(t testing.TB, s *sim.Server, req sim.FaultRequest) {
	t.Helper()
	postJSON(t, s.URL()+"/admin/faults", req)
}

func TestSimStoredRemovedCleared(t *testing.T) {
	s := startSim(t, nil, nil)
	_, nc := startNATS(t)
	a, _ := startSimAgent(t, s, nc, nil)
	v := newView(t, nc, a.ID())
	w := newWorkload(s, 1)

	// Stored: chains from cached parents, adapters and salts; removed: 64 blocks hold
	// far less than the workload, so the engine evicts.
	w.run(t, s, 40)
	simConverge(t, s, a, v)
	if got := metricValue(a.met.eventsReceived[KindBlockRemoved]); got == 0 {
		t.Fatal("no BlockRemoved events: the workload did not evict")
	}
	seeds := map[uint64]bool{}
	for _, b := range v.batches {
		for _, st := range b.Stored {
			seeds[st.ParentKey] = true
		}
	}
	for _, sd := range []uint64{kvblock.Seed(w.model, "", ""), kvblock.Seed(w.model, simAdapter, ""), kvblock.Seed(w.model, "", "salt-1")} {
		if !seeds[sd] {
			t.Errorf("no stored run under seed %x: adapter/salt requests not mirrored", sd)
		}
	}

	// Cleared: the engine resets its prefix cache (AllBlocksCleared).
	postJSON(t, s.URL()+"/reset_prefix_cache", map[string]any{})
	if len(s.KVBlockKeys()) != 0 {
		t.Fatal("sim cache not empty after reset")
	}
	simConverge(t, s, a, v)
	if got := metricValue(a.met.eventsReceived[KindAllBlocksCleared]); got == 0 {
		t.Fatal("no AllBlocksCleared event received")
	}
	w.run(t, s, 10)
	simConverge(t, s, a, v)
	if got := metricValue(a.met.resyncs); got != 0 {
		t.Errorf("resyncs %v on a clean stream", got)
	}
	if got := metricValue(a.met.orphans); got != 0 {
		t.Errorf("orphans %v on a clean stream", got)
	}
}

func TestSimDroppedBatchesConverge(t *testing.T) {
	for _, replay := range []bool{true, false} {
		t.Run(fmt.Sprintf("replay=%v", replay), func(t *testing.T) {
			s := startSim(t, nil, func(c *sim.Config) {
				if !replay {
					c.KVEventsReplayEndpoint = ""
				}
			})
			_, nc := startNATS(t)
			a, _ := startSimAgent(t, s, nc, nil)
			v := newView(t, nc, a.ID())
			w := newWorkload(s, 2)
			setFaults(t, s, sim.FaultRequest{Faults: sim.Faults{DropEventsFraction: 0.1}})
			w.run(t, s, 60)
			// Stop dropping and send one more request, so the last batch is not lost for good.
			setFaults(t, s, sim.FaultRequest{})
			if replay {
				w.run(t, s, 1)
				simConverge(t, s, a, v)
				if got := metricValue(a.met.resyncs); got != 0 {
					t.Errorf("resyncs %v: replay should repair every gap", got)
				}
			} else {
				// Each gap starts a new epoch that relearns from the live stream only; it
				// never guesses the blocks it missed, so the view equals the engine's cache
				// once the engine has evicted everything cached before the last gap.
				w.turnover(t, s)
				simConverge(t, s, a, v)
				if got := metricValue(a.met.resyncs); got == 0 {
					t.Error("no resync after gaps without replay")
				}
			}
			if got := metricValue(a.met.gaps); got == 0 {
				t.Fatal("no gaps seen: the sim's drop fault did not act")
			}
			t.Logf("gaps %v, replays %v, resyncs %v, orphans %v, keys %d", metricValue(a.met.gaps),
				metricValue(a.met.replays), metricValue(a.met.resyncs), metricValue(a.met.orphans), len(a.Keys()))
		})
	}
}

func TestSimEngineRestart(t *testing.T) {
	s := startSim(t, nil, nil)
	_, nc := startNATS(t)
	a, _ := startSimAgent(t, s, nc, nil)
	v := newView(t, nc, a.ID())
	w := newWorkload(s, 3)
	w.run(t, s, 20)
	simConverge(t, s, a, v)
	epoch1, _ := a.Epoch()

	// Seq back to 0, cache wiped, new block hashes, no cleared event.
	setFaults(t, s, sim.FaultRequest{Restart: true})
	if len(s.KVBlockKeys()) != 0 {
		t.Fatal("sim cache not empty after restart")
	}
	w.run(t, s, 15)
	simConverge(t, s, a, v)
	epoch2, seq := a.Epoch()
	if epoch2 <= epoch1 || seq == 0 {
		t.Fatalf("epoch %d seq %d after the engine restart, was epoch %d", epoch2, seq, epoch1)
	}
	if got := metricValue(a.met.resyncs); got != 1 {
		t.Errorf("resyncs %v, want 1", got)
	}
	var cleared bool
	v.mu.Lock()
	for _, b := range v.batches {
		cleared = cleared || b.Epoch == epoch2 && b.Seq == 1 && b.Cleared
	}
	v.mu.Unlock()
	if !cleared {
		t.Error("the new epoch was not announced with cleared=true at seq 1")
	}
}

func TestSimAgentRestart(t *testing.T) {
	s := startSim(t, nil, nil)
	_, nc := startNATS(t)
	a1, stop1 := startSimAgent(t, s, nc, nil)
	v := newView(t, nc, a1.ID())
	w := newWorkload(s, 4)
	w.run(t, s, 20)
	simConverge(t, s, a1, v)
	epoch1, _ := a1.Epoch()
	stop1()
	w.run(t, s, 20) // the engine goes on while no agent runs

	// The new agent (same instance id) announces a new epoch and relearns the engine's
	// whole history from the replay buffer.
	a2, _ := startSimAgent(t, s, nc, nil)
	if a2.ID() != a1.ID() {
		t.Fatalf("instance id %q, was %q", a2.ID(), a1.ID())
	}
	w.run(t, s, 10)
	simConverge(t, s, a2, v)
	if epoch2, _ := a2.Epoch(); epoch2 <= epoch1 {
		t.Fatalf("restarted agent epoch %d ≤ %d", epoch2, epoch1)
	}
}

func TestSimAgentRestartShortReplayBuffer(t *testing.T) {
	// The replay buffer keeps only 4 batches: a restarted agent cannot learn the
	// engine's past, holds no key the engine lacks, and converges after turnover.
	s := startSim(t, nil, func(c *sim.Config) { c.KVEventsBufferSteps = 4 })
	_, nc := startNATS(t)
	a1, stop1 := startSimAgent(t, s, nc, nil)
	w := newWorkload(s, 5)
	w.run(t, s, 20)
	eventually(t, "first agent mirror", func() bool { return slices.Equal(a1.Keys(), s.KVBlockKeys()) })
	stop1()
	w.run(t, s, 20)
	a2, _ := startSimAgent(t, s, nc, nil)
	v := newView(t, nc, a2.ID())
	w.run(t, s, 10)
	simKeys := s.KVBlockKeys()
	for _, k := range a2.Keys() {
		if _, ok := slices.BinarySearch(simKeys, k); !ok {
			t.Fatalf("agent without history holds key %x the engine does not have", k)
		}
	}
	w.turnover(t, s)
	simConverge(t, s, a2, v)
}

func TestSimNATSRestart(t *testing.T) {
	s := startSim(t, nil, nil)
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	connect := func(name string) *nats.Conn {
		nc, err := natsutil.Connect(natsutil.ClientConfig{URL: srv.ClientURL(), Name: name, Log: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	agentNC, viewNC := connect("agent"), connect("view")
	a, _ := startSimAgent(t, s, agentNC, nil)
	v := newView(t, viewNC, a.ID())
	w := newWorkload(s, 6)
	w.run(t, s, 15)
	simConverge(t, s, a, v)
	epoch1, _ := a.Epoch()

	srv.Shutdown()
	eventually(t, "agent sees NATS down", func() bool { return !agentNC.IsConnected() })
	w.run(t, s, 20) // the agent keeps mirroring while NATS is away
	eventually(t, "mirror while NATS is down", func() bool { return slices.Equal(a.Keys(), s.KVBlockKeys()) })
	srv2 := restartNATS(t, srv, addr)
	t.Cleanup(srv2.Shutdown)
	eventually(t, "both clients reconnected", func() bool { return agentNC.IsConnected() && viewNC.IsConnected() })
	// Nothing lost: the view catches up (buffered publishes, or a snapshot prompted by the
	// reconnect heartbeat) without the agent starting a new epoch.
	simConverge(t, s, a, v)
	w.run(t, s, 5)
	simConverge(t, s, a, v)
	if epoch2, _ := a.Epoch(); epoch2 != epoch1 {
		t.Errorf("epoch changed across a NATS restart: %d → %d", epoch1, epoch2)
	}
}

// freeTCPPort returns a port that was free a moment ago.
func freeTCPPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestSimGarbageFrames(t *testing.T) {
	// The agent binds its SUB; the simulator and a garbage publisher both connect to it.
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freeTCPPort(t))
	s := startSim(t, nil, func(c *sim.Config) { c.KVEventsEndpoint = ep })
	_, nc := startNATS(t)
	a, _ := startSimAgent(t, s, nc, func(c *Config) { c.ZMQEndpoint, c.ZMQBind = ep, true })
	if a.ZMQAddr() != ep {
		t.Fatalf("bound %q, want %q", a.ZMQAddr(), ep)
	}
	v := newView(t, nc, a.ID())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	garbage := zmq4.NewPub(ctx, zmq4.WithDialerMaxRetries(-1))
	defer garbage.Close()
	if err := garbage.Dial(ep); err != nil {
		t.Fatal(err)
	}
	eventually(t, "garbage publisher has the agent's subscription", func() bool {
		return len(garbage.(zmq4.Topics).Topics()) > 0
	})

	vec := loadVectors(t)
	rng := rand.New(rand.NewPCG(7, 7))
	random := make([]byte, 300)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	seqFrame := be64(1 << 40) // a seq far ahead: it must not count as a gap
	kinds := [][][]byte{
		{[]byte("kv"), seqFrame},                                 // two frames
		{[]byte("kv"), seqFrame, vec["V1"], []byte("extra")},     // four frames
		{[]byte("kv"), []byte{1, 2, 3}, vec["V1"]},               // short seq frame
		{[]byte("kv"), seqFrame, vec["V1"][:len(vec["V1"])*2/3]}, // truncated msgpack
		{[]byte("kv"), seqFrame, random},                         // random bytes
		{random[:1]},                                             // one frame
	}
	w := newWorkload(s, 7)
	sent := 0
	for range 3 {
		for _, k := range kinds {
			if err := garbage.SendMulti(zmq4.NewMsgFrom(k...)); err != nil {
				t.Fatal(err)
			}
			sent++
			w.run(t, s, 2) // the engine keeps going in between
		}
	}
	eventually(t, "every garbage message counted", func() bool { return metricValue(a.met.decodeErrors) == float64(sent) })
	simConverge(t, s, a, v)
	for name, c := range map[string]prometheus.Collector{"gaps": a.met.gaps, "resyncs": a.met.resyncs, "orphans": a.met.orphans} {
		if got := metricValue(c); got != 0 {
			t.Errorf("%s %v after garbage frames, want 0", name, got)
		}
	}
	if got := metricValue(a.met.decodeErrors); got != float64(sent) {
		t.Errorf("decode errors %v, want %d", got, sent)
	}
}

// TestSimTextPrompts drives the simulator with text and chat prompts through the
// embedded tokenizer (slow to load under -race, so not in -short).
func TestSimTextPrompts(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: loads the embedded tokenizer")
	}
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatalf("tokenizer: %v", err)
	}
	s := startSim(t, tok, nil)
	_, nc := startNATS(t)
	a, _ := startSimAgent(t, s, nc, nil)
	v := newView(t, nc, a.ID())
	model := s.Config().Model
	system := "You are a careful assistant who answers questions about the kvroute router. "
	for i := range 12 {
		postJSON(t, s.URL()+"/v1/chat/completions", map[string]any{"model": model, "max_tokens": 2,
			"messages": []map[string]string{{"role": "system", "content": system + system},
				{"role": "user", "content": fmt.Sprintf("Question %d: how does prefix caching work with %d blocks?", i%4, i)}}})
		postJSON(t, s.URL()+"/v1/completions", map[string]any{"model": model, "max_tokens": 2,
			"prompt": fmt.Sprintf("%s Tell me story number %d about a fox.", system, i%3)})
	}
	simConverge(t, s, a, v)
	if len(a.Keys()) == 0 {
		t.Fatal("no keys mirrored")
	}
}
