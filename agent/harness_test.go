package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/kvroute/kvroute/internal/natsutil"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// fakeEngine is a real engine endpoint set for tests: a ZMQ PUB socket, a ZMQ ROUTER
// replay socket keeping every batch, and an HTTP server with /v1/models and /metrics.
type fakeEngine struct {
	t       testing.TB
	pub     zmq4.Socket
	router  zmq4.Socket
	http    *httptest.Server
	model   string
	mu      sync.Mutex
	seq     uint64
	history map[uint64][]byte // seq → payload
	oldest  uint64            // replay keeps seqs ≥ oldest
	cancel  context.CancelFunc
}

func newFakeEngine(t testing.TB, model string, firstSeq uint64) *fakeEngine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e := &fakeEngine{t: t, model: model, seq: firstSeq - 1, history: map[uint64][]byte{}, cancel: cancel}
	e.pub = zmq4.NewPub(ctx)
	if err := e.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	e.router = zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("replay")))
	if err := e.router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go e.serveReplay()
	e.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","root":%q,"parent":null},
				{"id":"ad1","object":"model","root":"/lora/ad1","parent":%q}]}`, model, model, model)
		case "/metrics":
			fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3\n"+
				"vllm:num_requests_waiting{model_name=\"m\",engine=\"0\"} 2\n"+
				"# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"+
				"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{model_name=\"m\"} 32\n"+
				"# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{model_name=\"m\"} 113\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.close)
	return e
}

func (e *fakeEngine) close() {
	e.cancel()
	_ = e.pub.Close()
	_ = e.router.Close()
	e.http.Close()
}

func (e *fakeEngine) pubAddr() string    { return "tcp://" + e.pub.Addr().String() }
func (e *fakeEngine) replayAddr() string { return "tcp://" + e.router.Addr().String() }

// send publishes one batch with the next seq; drop keeps it out of the live stream
// (a slow-subscriber drop) but in the replay buffer.
func (e *fakeEngine) send(payload []byte, drop bool) uint64 {
	e.mu.Lock()
	e.seq++
	seq := e.seq
	e.history[seq] = payload
	e.mu.Unlock()
	if !drop {
		e.sendRaw([]byte("kv"), binary.BigEndian.AppendUint64(nil, seq), payload)
	}
	return seq
}

func (e *fakeEngine) sendRaw(frames ...[]byte) {
	if err := e.pub.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		e.t.Errorf("pub send: %v", err)
	}
}

// restart wipes the history and restarts seq (a new engine process).
func (e *fakeEngine) restart(firstSeq uint64) {
	e.mu.Lock()
	e.seq, e.history, e.oldest = firstSeq-1, map[uint64][]byte{}, 0
	e.mu.Unlock()
}

// forget drops replay history below seq (a bounded buffer).
func (e *fakeEngine) forget(below uint64) {
	e.mu.Lock()
	e.oldest = below
	e.mu.Unlock()
}

func (e *fakeEngine) serveReplay() {
	for {
		msg, err := e.router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) < 3 {
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[len(msg.Frames)-1])
		e.mu.Lock()
		var seqs []uint64
		for s := range e.history {
			if s >= start && s >= e.oldest {
				seqs = append(seqs, s)
			}
		}
		slices.Sort(seqs)
		var replies [][][]byte
		for _, s := range seqs {
			replies = append(replies, [][]byte{id, {}, []byte("kv"), binary.BigEndian.AppendUint64(nil, s), e.history[s]})
		}
		e.mu.Unlock()
		replies = append(replies, [][]byte{id, {}, {}, binary.BigEndian.AppendUint64(nil, endOfReplay), {}})
		for _, r := range replies {
			if err := e.router.SendMulti(zmq4.NewMsgFrom(r...)); err != nil {
				return
			}
		}
	}
}

// startNATS starts an in-process NATS server and returns it with a client connection.
func startNATS(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsutil.Connect(natsutil.ClientConfig{URL: srv.ClientURL(), Name: t.Name(), Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}

func testLogger(t testing.TB) *slog.Logger {
	lv := slog.LevelWarn
	if os.Getenv("AGENT_TEST_DEBUG") != "" {
		lv = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("test", t.Name())
}

// view is an index stand-in: it applies the published batches with the proto's rules
// and heals gaps and new epochs with a snapshot request, like the real index.
type view struct {
	t       testing.TB
	nc      *nats.Conn
	id      string
	mu      sync.Mutex
	epoch   uint64
	seq     uint64
	keys    map[uint64]bool
	batches []*kvroutev1.EventBatch
	errs    []string
	snaps   int
}

func newView(t testing.TB, nc *nats.Conn, id string) *view {
	v := &view{t: t, nc: nc, id: id, keys: map[uint64]bool{}}
	sub, err := nc.Subscribe(kvroutev1.SubjectEvents+id, func(m *nats.Msg) {
		var b kvroutev1.EventBatch
		if err := proto.Unmarshal(m.Data, &b); err != nil {
			v.fail("bad batch: %v", err)
			return
		}
		v.apply(&b)
	})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := nc.Subscribe(kvroutev1.SubjectHeartbeat+id, func(m *nats.Msg) {
		var h kvroutev1.Heartbeat
		if err := proto.Unmarshal(m.Data, &h); err != nil {
			v.fail("bad heartbeat: %v", err)
			return
		}
		v.mu.Lock()
		behind := h.Epoch != v.epoch || h.LastSeq > v.seq
		v.mu.Unlock()
		if behind {
			go v.snapshot()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(); _ = hb.Unsubscribe() })
	return v
}

func (v *view) fail(format string, a ...any) {
	v.mu.Lock()
	v.errs = append(v.errs, fmt.Sprintf(format, a...))
	v.mu.Unlock()
}

func (v *view) apply(b *kvroutev1.EventBatch) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.batches = append(v.batches, b)
	switch {
	case b.Epoch > v.epoch:
		if !b.Cleared || b.Seq != 1 {
			// Joined mid-epoch: needs a snapshot.
			go v.snapshot()
			return
		}
		v.epoch, v.seq = b.Epoch, 0
	case b.Epoch < v.epoch:
		v.errs = append(v.errs, fmt.Sprintf("epoch went back: %d < %d", b.Epoch, v.epoch))
		return
	}
	if b.Seq <= v.seq {
		return // covered by a snapshot
	}
	if b.Seq != v.seq+1 {
		go v.snapshot()
		return
	}
	v.seq = b.Seq
	if b.Cleared {
		clear(v.keys)
	}
	for _, k := range b.Removed {
		delete(v.keys, k)
	}
	for _, s := range b.Stored {
		for _, k := range s.Keys {
			if v.keys[k] && !b.Cleared {
				v.errs = append(v.errs, fmt.Sprintf("seq %d stores present key %x", b.Seq, k))
			}
			v.keys[k] = true
		}
	}
}

// snapshot requests the agent's full key set and replaces the view with it.
func (v *view) snapshot() {
	inbox := v.nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := v.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		v.fail("snapshot subscribe: %v", err)
		return
	}
	defer sub.Unsubscribe()
	req, _ := proto.Marshal(&kvroutev1.SnapshotRequest{Instance: v.id, MaxKeysPerChunk: 100, Requester: "test"})
	if err := v.nc.PublishRequest(kvroutev1.SubjectSnapshot+v.id, inbox, req); err != nil {
		return
	}
	keys := map[uint64]bool{}
	var first *kvroutev1.SnapshotChunk
	for {
		select {
		case m := <-ch:
			var c kvroutev1.SnapshotChunk
			if err := proto.Unmarshal(m.Data, &c); err != nil || c.Error != "" {
				v.fail("snapshot chunk: %v %s", err, c.Error)
				return
			}
			if first == nil {
				first = &c
			}
			for _, k := range c.Keys {
				keys[k] = true
			}
			if c.Last {
				v.mu.Lock()
				if first.Epoch > v.epoch || first.Epoch == v.epoch && first.Seq >= v.seq {
					v.epoch, v.seq, v.keys = first.Epoch, first.Seq, keys
					v.snaps++
				}
				v.mu.Unlock()
				return
			}
		case <-time.After(5 * time.Second):
			return
		}
	}
}

func (v *view) sorted() []uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]uint64, 0, len(v.keys))
	for k := range v.keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (v *view) check(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.errs {
		t.Error(e)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventuallyOr(t, what, cond, nil)
}

// eventuallyOr is eventually that calls explain (when not nil) before failing.
func eventuallyOr(t testing.TB, what string, cond func() bool, explain func()) {
	t.Helper()
	eventuallyWithin(t, 15*time.Second, what, cond, explain)
}

// eventuallyWithin polls cond for up to d.
func eventuallyWithin(t testing.TB, d time.Duration, what string, cond func() bool, explain func()) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				explain()
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runAgent starts an agent on the fake engine and returns it with its registry.
func runAgent(t testing.TB, e *fakeEngine, nc *nats.Conn, mod func(*Config)) (*Agent, *prometheus.Registry, context.CancelFunc) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.EngineURL = e.http.URL
	cfg.ZMQEndpoint = e.pubAddr()
	cfg.ReplayEndpoint = e.replayAddr()
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.MinResyncInterval = 0
	if mod != nil {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	a, err := New(cfg, nc, reg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { stopOnce(t, cancel, done) }) }
	t.Cleanup(stop)
	// Wait until the SUB is connected and the engine's PUB knows the subscription.
	eventually(t, "agent subscribed", func() bool { return a.sub.conns.Load() > 0 })
	time.Sleep(150 * time.Millisecond)
	return a, reg, stop
}

func stopOnce(t testing.TB, cancel context.CancelFunc, done chan error) {
	{
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return")
		}
	}
}

// restartNATS starts a new server on the address the old one listened on.
func restartNATS(t testing.TB, old *server.Server, addr string) *server.Server {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	var srv *server.Server
	eventually(t, "NATS restarted on "+addr, func() bool {
		srv, err = natsutil.StartServer(natsutil.ServerConfig{Host: host, Port: port})
		return err == nil
	})
	return srv
}

// metricValue reads a counter or gauge.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var d dto.Metric
	if err := (<-ch).Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// gatheredNames returns the metric family names registered on reg.
func gatheredNames(t testing.TB, reg *prometheus.Registry) map[string]bool {
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		out[f.GetName()] = true
	}
	return out
}
