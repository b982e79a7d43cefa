package indexer

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/kvroute/kvroute/internal/natsutil"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// fakeAgent speaks the agent's side of the protocol over real NATS: it keeps a key set,
// publishes its net changes as EventBatches, heartbeats, and answers snapshot requests.
type fakeAgent struct {
	t     testing.TB
	nc    *nats.Conn
	id    string
	chunk int

	mu       sync.Mutex
	epoch    uint64
	seq      uint64
	keys     map[uint64]bool
	hits     float64
	queries  float64
	snapSub  *nats.Subscription
	snapReqs int
}

func newFakeAgent(t testing.TB, url, id string) *fakeAgent {
	nc, err := nats.Connect(url)
	must(t, err)
	t.Cleanup(nc.Close)
	a := &fakeAgent{t: t, nc: nc, id: id, chunk: 7, epoch: uint64(time.Now().UnixNano()), keys: map[uint64]bool{}}
	a.serveSnapshots()
	return a
}

func (a *fakeAgent) serveSnapshots() {
	sub, err := a.nc.Subscribe(kvroutev1.SubjectSnapshot+a.id, func(m *nats.Msg) {
		var req kvroutev1.SnapshotRequest
		if err := proto.Unmarshal(m.Data, &req); err != nil {
			a.t.Errorf("agent %s: bad snapshot request: %v", a.id, err)
			return
		}
		a.mu.Lock()
		a.snapReqs++
		keys := a.sortedLocked()
		epoch, seq := a.epoch, a.seq
		a.mu.Unlock()
		for c := 0; ; c++ {
			part := keys[min(c*a.chunk, len(keys)):min((c+1)*a.chunk, len(keys))]
			last := (c+1)*a.chunk >= len(keys)
			data, _ := proto.Marshal(&kvroutev1.SnapshotChunk{Instance: a.id, Epoch: epoch, Seq: seq, Chunk: uint32(c),
				Last: last, Keys: part, TotalKeys: uint64(len(keys)), BlockSize: 16})
			if err := a.nc.Publish(m.Reply, data); err != nil {
				a.t.Errorf("agent %s: reply: %v", a.id, err)
				return
			}
			if last {
				return
			}
		}
	})
	must(a.t, err)
	must(a.t, a.nc.Flush())
	a.snapSub = sub
}

func (a *fakeAgent) stopSnapshots() { must(a.t, a.snapSub.Unsubscribe()); must(a.t, a.nc.Flush()) }

func (a *fakeAgent) sortedLocked() []uint64 {
	out := make([]uint64, 0, len(a.keys))
	for k := range a.keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (a *fakeAgent) Keys() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sortedLocked()
}

// change applies stored/removed to the mirror and publishes the batch unless drop.
func (a *fakeAgent) change(stored, removed []uint64, drop bool) {
	a.mu.Lock()
	a.seq++
	b := &kvroutev1.EventBatch{Instance: a.id, Epoch: a.epoch, Seq: a.seq, BlockSize: 16, Cleared: a.seq == 1,
		SentAtUnixNano: time.Now().UnixNano()}
	var netStored, netRemoved []uint64
	for _, k := range removed {
		if a.keys[k] {
			delete(a.keys, k)
			netRemoved = append(netRemoved, k)
		}
	}
	for _, k := range stored {
		if !a.keys[k] {
			a.keys[k] = true
			netStored = append(netStored, k)
		}
	}
	b.Removed = netRemoved
	if len(netStored) > 0 {
		b.Stored = []*kvroutev1.Stored{{Keys: netStored}}
	}
	a.mu.Unlock()
	if drop {
		return
	}
	data, err := proto.Marshal(b)
	must(a.t, err)
	must(a.t, a.nc.Publish(kvroutev1.SubjectEvents+a.id, data))
}

// restart starts a new epoch with an empty mirror (like an engine restart).
func (a *fakeAgent) restart() {
	a.mu.Lock()
	a.epoch++
	a.seq = 0
	a.keys = map[uint64]bool{}
	a.mu.Unlock()
}

func (a *fakeAgent) heartbeat() {
	a.mu.Lock()
	hb := &kvroutev1.Heartbeat{
		Descriptor_: &kvroutev1.InstanceDescriptor{Id: a.id, EngineUrl: "http://" + a.id, Model: "m", BlockSize: 16},
		Load:        &kvroutev1.Load{Running: 1, PrefixCacheHits: a.hits, PrefixCacheQueries: a.queries, Ok: true},
		Epoch:       a.epoch, LastSeq: a.seq, KeysHeld: uint64(len(a.keys)), SentAtUnixNano: time.Now().UnixNano(),
	}
	a.mu.Unlock()
	data, err := proto.Marshal(hb)
	must(a.t, err)
	must(a.t, a.nc.Publish(kvroutev1.SubjectHeartbeat+a.id, data))
}

// heartbeatLoop heartbeats every d until the returned stop is called.
func (a *fakeAgent) heartbeatLoop(d time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			a.heartbeat()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.StaleAfter = 300 * time.Millisecond
	cfg.InstanceTTL = 900 * time.Millisecond
	cfg.GoneRetention = 2 * time.Second
	cfg.SnapshotTimeout = 500 * time.Millisecond
	cfg.SnapshotRetryMin = 20 * time.Millisecond
	cfg.SnapshotRetryMax = 200 * time.Millisecond
	cfg.WarmupWindow = 5 * time.Second
	return cfg
}

type testEnv struct {
	url string
	svc *Service
	reg *prometheus.Registry
}

func startNATS(t testing.TB) string {
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	must(t, err)
	t.Cleanup(srv.Shutdown)
	return srv.ClientURL()
}

func startService(t testing.TB, url string, cfg Config) *testEnv {
	nc, err := nats.Connect(url)
	must(t, err)
	t.Cleanup(nc.Close)
	reg := prometheus.NewRegistry()
	svc, err := New(cfg, nc, reg, slog.New(slog.DiscardHandler))
	must(t, err)
	must(t, svc.Start(context.Background()))
	t.Cleanup(func() { _ = svc.Close() })
	return &testEnv{url: url, svc: svc, reg: reg}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *testEnv) state(id string) State {
	in, ok := e.svc.Instance(id)
	if !ok {
		return 0
	}
	return in.State
}

func sameKeys(e *testEnv, a *fakeAgent) bool {
	return slices.Equal(e.svc.Index().InstanceKeys(a.id, nil), a.Keys())
}

func randKeys(rng *rand.Rand, n int) []uint64 {
	k := make([]uint64, n)
	for i := range k {
		k[i] = rng.Uint64()
	}
	return k
}

func TestServiceFollowsAgentInOrder(t *testing.T) {
	url := startNATS(t)
	e := startService(t, url, testConfig())
	a := newFakeAgent(t, url, "eng-1")
	stop := a.heartbeatLoop(50 * time.Millisecond)
	defer stop()
	rng := rand.New(rand.NewPCG(1, 2))
	var held []uint64
	for i := range 50 {
		st := randKeys(rng, 5)
		var rm []uint64
		if i%3 == 0 && len(held) > 4 {
			rm = held[:4]
			held = held[4:]
		}
		held = append(held, st...)
		a.change(st, rm, false)
	}
	eventually(t, 5*time.Second, "index == agent mirror", func() bool { return sameKeys(e, a) && e.state(a.id) == StateReady })
	// The heartbeat loop runs beside the batches: wait for one to be recorded too.
	eventually(t, 5*time.Second, "a heartbeat recorded", func() bool {
		in, _ := e.svc.Instance(a.id)
		return in.Descriptor != nil && in.Load != nil
	})
	in, _ := e.svc.Instance(a.id)
	if in.IngestionLag <= 0 || in.IngestionLag > 5*time.Second {
		t.Fatalf("ingestion lag %v: want the moving average of batch ages, > 0 and < 5 s", in.IngestionLag)
	}
	if in.Epoch != a.epoch || in.LastSeq != 50 || in.Blocks != len(a.Keys()) {
		t.Fatalf("instance = %+v, want epoch %d, seq 50, %d blocks", in, a.epoch, len(a.Keys()))
	}
	if in.Descriptor == nil || in.Descriptor.EngineUrl != "http://eng-1" || in.Load == nil {
		t.Fatalf("descriptor/load not recorded: %+v", in)
	}
	// The first batch (seq 1, cleared) needs no snapshot, and nothing went missing.
	if st := e.svc.Stats(); st.Gaps != 0 {
		t.Fatalf("Stats = %+v, want no gaps", st)
	}
	keys := a.Keys()
	if m := e.svc.Lookup(keys[:1], nil); len(m) != 1 || m[0] != (Match{"eng-1", 1}) {
		t.Fatalf("Lookup = %v", m)
	}
	if got := metricValue(t, e.svc.m.gaps); got != 0 {
		t.Fatalf("gaps metric = %v", got)
	}
	if n := seriesCount(t, e.reg, "kvroute_index_instance_state"); n != 5 {
		t.Fatalf("instance_state series = %d, want 5", n)
	}
}

func TestServiceGapTriggersSnapshotAndSplice(t *testing.T) {
	url := startNATS(t)
	e := startService(t, url, testConfig())
	a := newFakeAgent(t, url, "eng-gap")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		a.change(randKeys(rng, 4), nil, false)
	}
	eventually(t, 5*time.Second, "first batches applied", func() bool { return sameKeys(e, a) })
	a.change(randKeys(rng, 4), nil, true) // lost on the way
	for range 5 {
		a.change(randKeys(rng, 4), nil, false)
	}
	eventually(t, 5*time.Second, "index == agent after gap", func() bool {
		return sameKeys(e, a) && e.state(a.id) == StateReady
	})
	st := e.svc.Stats()
	if st.Gaps < 1 || st.Snapshots < 1 {
		t.Fatalf("Stats = %+v, want a gap and a snapshot", st)
	}
	// Later batches apply on top of the spliced state.
	a.change(randKeys(rng, 3), a.Keys()[:2], false)
	eventually(t, 5*time.Second, "batch after splice", func() bool { return sameKeys(e, a) })
}

func TestServiceLostTrailingBatchViaHeartbeat(t *testing.T) {
	url := startNATS(t)
	e := startService(t, url, testConfig())
	a := newFakeAgent(t, url, "eng-trail")
	rng := rand.New(rand.NewPCG(5, 6))
	a.change(randKeys(rng, 4), nil, false)
	eventually(t, 5*time.Second, "first batch", func() bool { return sameKeys(e, a) })
	a.change(randKeys(rng, 4), nil, true) // the last batch is lost; only heartbeats follow
	stop := a.heartbeatLoop(40 * time.Millisecond)
	defer stop()
	eventually(t, 5*time.Second, "heartbeat-driven resync", func() bool { return sameKeys(e, a) })
	if st := e.svc.Stats(); st.Snapshots < 1 {
		t.Fatalf("Stats = %+v, want a snapshot", st)
	}
}

func TestServiceJoinsRunningAgentAndNewEpoch(t *testing.T) {
	url := startNATS(t)
	a := newFakeAgent(t, url, "eng-late")
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10 {
		a.change(randKeys(rng, 6), nil, false) // nobody listens yet
	}
	e := startService(t, url, testConfig())
	stop := a.heartbeatLoop(40 * time.Millisecond)
	defer stop()
	eventually(t, 5*time.Second, "joined from snapshot", func() bool {
		return sameKeys(e, a) && e.state(a.id) == StateReady
	})
	// The engine restarts: a new epoch begins from nothing (cleared, seq 1).
	a.restart()
	fresh := randKeys(rng, 5)
	a.change(fresh, nil, false)
	eventually(t, 5*time.Second, "new epoch applied", func() bool { return sameKeys(e, a) })
	if got := e.svc.Index().InstanceKeys(a.id, nil); len(got) != 5 {
		t.Fatalf("after restart index holds %d keys, want the 5 new ones", len(got))
	}
}

func TestServiceSnapshotRetriesUntilAgentAnswers(t *testing.T) {
	url := startNATS(t)
	a := newFakeAgent(t, url, "eng-mute")
	a.stopSnapshots()
	rng := rand.New(rand.NewPCG(9, 10))
	for range 3 {
		a.change(randKeys(rng, 3), nil, false)
	}
	e := startService(t, url, testConfig())
	stop := a.heartbeatLoop(40 * time.Millisecond)
	defer stop()
	eventually(t, 5*time.Second, "a failed snapshot", func() bool {
		return metricValue(t, e.svc.m.snapshotErrors) >= 1
	})
	if s := e.state(a.id); s != StateJoining {
		t.Fatalf("state %v while the agent does not answer, want joining", s)
	}
	a.serveSnapshots()
	eventually(t, 5*time.Second, "snapshot after retry", func() bool { return sameKeys(e, a) && e.state(a.id) == StateReady })
}

func TestServiceStaleThenGone(t *testing.T) {
	url := startNATS(t)
	e := startService(t, url, testConfig())
	a := newFakeAgent(t, url, "eng-dies")
	b := newFakeAgent(t, url, "eng-lives")
	shared := []uint64{101, 102, 103}
	stopA := a.heartbeatLoop(40 * time.Millisecond)
	stopB := b.heartbeatLoop(40 * time.Millisecond)
	defer stopB()
	a.change(shared, nil, false)
	b.change(shared[:1], nil, false)
	var events []InstanceEvent
	var mu sync.Mutex
	cancel := e.svc.Subscribe(func(ev InstanceEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	defer cancel()
	eventually(t, 5*time.Second, "both ready", func() bool {
		return e.state("eng-dies") == StateReady && e.state("eng-lives") == StateReady && len(e.svc.Lookup(shared, nil)) == 2
	})
	stopA()
	eventually(t, 5*time.Second, "stale", func() bool { return e.state("eng-dies") == StateStale })
	if m := e.svc.Lookup(shared, nil); len(m) != 2 {
		t.Fatalf("stale instance's keys must still count: %v", m)
	}
	eventually(t, 5*time.Second, "gone", func() bool { return e.state("eng-dies") == StateGone })
	if m := e.svc.Lookup(shared, nil); !slices.Equal(m, []Match{{"eng-lives", 1}}) {
		t.Fatalf("Lookup after gone = %v, want only eng-lives", m)
	}
	mu.Lock()
	var removed bool
	for _, ev := range events {
		if ev.Type == EventRemoved && ev.Instance.ID == "eng-dies" {
			removed = true
		}
	}
	mu.Unlock()
	if !removed {
		t.Fatal("no removed event for eng-dies")
	}
	// Gone instances stay visible for GoneRetention, then disappear.
	eventually(t, 5*time.Second, "gone record dropped", func() bool { _, ok := e.svc.Instance("eng-dies"); return !ok })
}

func TestServiceWarmup(t *testing.T) {
	url := startNATS(t)
	cfg := testConfig()
	cfg.WarmupWindow = 150 * time.Millisecond
	e := startService(t, url, cfg)
	old := newFakeAgent(t, url, "eng-old")
	fresh := newFakeAgent(t, url, "eng-new")
	var warm []InstanceEvent
	var mu sync.Mutex
	cancel := e.svc.Subscribe(func(ev InstanceEvent) {
		if ev.Type == EventWarm {
			mu.Lock()
			warm = append(warm, ev)
			mu.Unlock()
		}
	})
	defer cancel()
	// The old instance hits 80% of its prompt tokens; the new one starts cold and climbs.
	for i := range 20 {
		old.mu.Lock()
		old.hits += 80
		old.queries += 100
		old.mu.Unlock()
		fresh.mu.Lock()
		fresh.hits += float64(min(10*i, 95))
		fresh.queries += 100
		fresh.mu.Unlock()
		old.heartbeat()
		fresh.heartbeat()
		time.Sleep(20 * time.Millisecond)
	}
	eventually(t, 5*time.Second, "new instance warm", func() bool {
		in, _ := e.svc.Instance("eng-new")
		return in.Warmup.Warm
	})
	if in, _ := e.svc.Instance("eng-old"); in.Warmup.HitRate < 0.79 || in.Warmup.HitRate > 0.81 {
		t.Fatalf("old instance hit rate %v, want 0.8", in.Warmup.HitRate)
	}
	in, _ := e.svc.Instance("eng-new")
	if in.Warmup.WarmupTime <= 0 || in.Warmup.FleetHitRate <= 0 || in.Warmup.HitRate < in.Warmup.FleetHitRate {
		t.Fatalf("warm-up = %+v", in.Warmup)
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, ev := range warm {
		found = found || ev.Instance.ID == "eng-new"
	}
	if !found {
		t.Fatalf("no warm event for eng-new: %v", warm)
	}
}

func TestServiceBadMessages(t *testing.T) {
	url := startNATS(t)
	e := startService(t, url, testConfig())
	nc, err := nats.Connect(url)
	must(t, err)
	defer nc.Close()
	must(t, nc.Publish(kvroutev1.SubjectEvents+"x", []byte{0xff, 0xff, 0xff}))
	must(t, nc.Publish(kvroutev1.SubjectHeartbeat+"y", []byte("not a proto")))
	data, _ := proto.Marshal(&kvroutev1.EventBatch{Instance: "bad id!", Epoch: 1, Seq: 1, Cleared: true})
	must(t, nc.Publish(kvroutev1.SubjectEvents+"z", data))
	eventually(t, 5*time.Second, "decode errors counted", func() bool {
		return metricValue(t, e.svc.m.decodeErrors) == 3
	})
	if n := len(e.svc.Instances()); n != 0 {
		t.Fatalf("bad messages created %d instances", n)
	}
	// A good agent still works afterwards.
	a := newFakeAgent(t, url, "eng-ok")
	a.change([]uint64{1, 2}, nil, false)
	eventually(t, 5*time.Second, "good batch after bad ones", func() bool { return sameKeys(e, a) })
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for i, mod := range []func(*Config){
		func(c *Config) { c.MaxKeys = -1 },
		func(c *Config) { c.MaxInstances = 0 },
		func(c *Config) { c.InstanceTTL = c.StaleAfter / 2 },
		func(c *Config) { c.SnapshotTimeout = 0 },
		func(c *Config) { c.SnapshotRetryMax = c.SnapshotRetryMin / 2 },
		func(c *Config) { c.BlockSize = 0 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Fatalf("case %d: %+v validated", i, c)
		}
	}
	if _, err := New(DefaultConfig(), nil, nil, nil); err == nil {
		t.Fatal("New without a NATS connection succeeded")
	}
}

// metricValue reads a counter's or gauge's current value.
func metricValue(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	must(t, c.Write(&m))
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("metric %v is neither counter nor gauge", c.Desc())
	return 0
}

// seriesCount gathers reg and counts the series of one metric family.
func seriesCount(t testing.TB, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.Metric)
		}
	}
	return 0
}

// TestServiceSnapshotProtocolErrors: an agent error, a chunk of another instance, and
// chunks out of order are each refused (counted, retried); a good answer then wins.
func TestServiceSnapshotProtocolErrors(t *testing.T) {
	url := startNATS(t)
	a := newFakeAgent(t, url, "eng-odd")
	a.stopSnapshots()
	a.change([]uint64{1, 2, 3}, nil, false)
	a.change([]uint64{4}, nil, false)
	replies := [][]*kvroutev1.SnapshotChunk{
		{{Instance: "eng-odd", Error: "mirror not ready"}},
		{{Instance: "someone-else", Epoch: a.epoch, Seq: 2, Last: true, Keys: []uint64{9}}},
		{{Instance: "eng-odd", Epoch: a.epoch, Seq: 2, Chunk: 0, Keys: []uint64{1}},
			{Instance: "eng-odd", Epoch: a.epoch, Seq: 2, Chunk: 2, Last: true, Keys: []uint64{2}}},
	}
	var mu sync.Mutex
	n := 0
	sub, err := a.nc.Subscribe(kvroutev1.SubjectSnapshot+a.id, func(m *nats.Msg) {
		mu.Lock()
		r := replies[n%len(replies)]
		n++
		mu.Unlock()
		for _, c := range r {
			data, _ := proto.Marshal(c)
			_ = a.nc.Publish(m.Reply, data)
		}
	})
	must(t, err)
	must(t, a.nc.Flush())
	e := startService(t, url, testConfig())
	stop := a.heartbeatLoop(30 * time.Millisecond)
	defer stop()
	eventually(t, 5*time.Second, "three refused snapshots", func() bool {
		return metricValue(t, e.svc.m.snapshotErrors) >= 3
	})
	if s := e.state(a.id); s != StateJoining {
		t.Fatalf("state %v after bad snapshots, want joining", s)
	}
	if got := e.svc.Index().InstanceKeys(a.id, nil); len(got) != 0 {
		t.Fatalf("bad snapshots stored keys %v", got)
	}
	must(t, sub.Unsubscribe())
	a.serveSnapshots()
	eventually(t, 5*time.Second, "good snapshot", func() bool { return sameKeys(e, a) && e.state(a.id) == StateReady })
}

// TestServiceBufferOverflow: while an agent does not answer, more batches arrive than the
// buffer holds; the overflow is counted and the later snapshot still makes the index exact.
func TestServiceBufferOverflow(t *testing.T) {
	url := startNATS(t)
	cfg := testConfig()
	cfg.MaxBufferedBatches = 4
	a := newFakeAgent(t, url, "eng-flood")
	a.stopSnapshots()
	a.change([]uint64{1}, nil, false)
	a.change([]uint64{2}, nil, false) // the index starts after these: it must snapshot
	e := startService(t, url, cfg)
	rng := rand.New(rand.NewPCG(13, 14))
	for range 20 {
		a.change(randKeys(rng, 2), nil, false)
	}
	eventually(t, 5*time.Second, "overflow counted", func() bool { return metricValue(t, e.svc.m.bufferOverflows) >= 1 })
	a.serveSnapshots()
	stop := a.heartbeatLoop(30 * time.Millisecond)
	defer stop()
	eventually(t, 5*time.Second, "exact after overflow", func() bool { return sameKeys(e, a) && e.state(a.id) == StateReady })
	a.change(randKeys(rng, 2), nil, false)
	eventually(t, 5*time.Second, "follows afterwards", func() bool { return sameKeys(e, a) })
}
