package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/tokenizer"
)

// memIndex is a hand-fed index: key → instances, with the same leading-run semantics
// as the real one.
type memIndex struct {
	mu    sync.Mutex
	keys  map[uint64]map[string]bool
	infos map[string]instanceInfo
}

func newMemIndex() *memIndex {
	return &memIndex{keys: map[uint64]map[string]bool{}, infos: map[string]instanceInfo{}}
}

func (m *memIndex) lookup(keys []uint64, dst []indexMatch) []indexMatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	runs := map[string]int{}
	alive := map[string]bool{}
	for i, k := range keys {
		holders := m.keys[k]
		if i == 0 {
			for id := range holders {
				alive[id] = true
			}
		}
		for id := range alive {
			if holders[id] {
				runs[id]++
			} else {
				delete(alive, id)
			}
		}
		if len(alive) == 0 {
			break
		}
	}
	ids := make([]string, 0, len(runs))
	for id := range runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		dst = append(dst, indexMatch{Instance: id, Blocks: runs[id]})
	}
	return dst
}

func (m *memIndex) instances() []instanceInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]instanceInfo, 0, len(m.infos))
	for _, in := range m.infos {
		out = append(out, in)
	}
	return out
}

func (m *memIndex) store(id string, keys []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if m.keys[k] == nil {
			m.keys[k] = map[string]bool{}
		}
		m.keys[k][id] = true
	}
}

func (m *memIndex) setInstance(info instanceInfo) {
	m.mu.Lock()
	m.infos[info.id] = info
	m.mu.Unlock()
}

// testEngine is an httptest stand-in for a vLLM server: it tokenizes like the router,
// keeps a prefix cache of kvblock keys, reports cached_tokens the way vLLM does (leading
// full blocks, at most (n-1)/B), and publishes what it cached to a memIndex (or not,
// with publish=false, to test the pending overlay).
type testEngine struct {
	t        *testing.T
	id       string
	model    string
	adapters []string
	tok      tokenizer.Tokenizer
	idx      *memIndex
	srv      *httptest.Server

	publish   atomic.Bool
	fail5xx   atomic.Int32                  // answer this many requests with 500
	hold      atomic.Pointer[chan struct{}] // when set, each completion waits for it to close
	breakMid  atomic.Bool                   // close the connection after the first chunk
	delay     atomic.Int64                  // nanoseconds before the first byte
	requests  atomic.Int32
	lastBody  atomic.Value // []byte
	mu        sync.Mutex
	cache     map[uint64]bool
	lastUsage atomic.Value // usage
}

type usage struct{ prompt, cached int }

func newTestEngine(t *testing.T, id string, tok tokenizer.Tokenizer, idx *memIndex, adapters ...string) *testEngine {
	e := &testEngine{t: t, id: id, model: tokenizer.DefaultModelName, adapters: adapters, tok: tok, idx: idx, cache: map[uint64]bool{}}
	e.publish.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { e.serve(w, r, openai.ParseChat) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { e.serve(w, r, openai.ParseCompletion) })
	mux.HandleFunc("POST /invocations", func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		e.lastBody.Store(b)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"engine":%q}`, e.id)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		data := []map[string]any{{"id": e.model, "object": "model", "parent": nil}}
		for _, a := range e.adapters {
			data = append(data, map[string]any{"id": a, "object": "model", "parent": e.model})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=%q} 0\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=%q} 0\n", e.model, e.model)
	})
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	if idx != nil {
		idx.setInstance(e.info())
	}
	return e
}

func (e *testEngine) info() instanceInfo {
	return instanceInfo{id: e.id, engineURL: e.srv.URL, model: e.model, adapters: e.adapters, blockSize: 16,
		routable: true, loadOK: true, idx: indexState{state: "ready"}}
}

func (e *testEngine) serve(w http.ResponseWriter, r *http.Request, parse func([]byte) (*openai.Request, error)) {
	e.requests.Add(1)
	body, _ := io.ReadAll(r.Body)
	e.lastBody.Store(body)
	if e.fail5xx.Load() > 0 {
		e.fail5xx.Add(-1)
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
		return
	}
	req, err := parse(body)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	res, err := req.Tokenize(r.Context(), e.tok)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	adapter := ""
	if req.Model != e.model {
		adapter = req.Model
	}
	keys := kvblock.Keys(nil, kvblock.Seed(e.model, adapter, req.CacheSalt), res.IDs, 16)
	e.mu.Lock()
	run := 0
	for run < len(keys) && e.cache[keys[run]] {
		run++
	}
	cached := min(run, (len(res.IDs)-1)/16) * 16
	for _, k := range keys {
		e.cache[k] = true
	}
	e.mu.Unlock()
	if e.publish.Load() && e.idx != nil {
		e.idx.store(e.id, keys)
	}
	e.lastUsage.Store(usage{len(res.IDs), cached})
	if h := e.hold.Load(); h != nil {
		select {
		case <-*h:
		case <-r.Context().Done():
			return
		}
	}
	if d := e.delay.Load(); d > 0 {
		select {
		case <-time.After(time.Duration(d)):
		case <-r.Context().Done():
			return
		}
	}
	u := map[string]any{"prompt_tokens": len(res.IDs), "completion_tokens": 3, "total_tokens": len(res.IDs) + 3,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached}}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": req.Model,
			"engine": e.id, "choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "a b c"}}}, "usage": u})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i, tok := range []string{"a", " b", " c"} {
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}],\"usage\":null}\n\n", tok)
		fl.Flush()
		if i == 0 && e.breakMid.Load() {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
	}
	if req.StreamIncludeUsage {
		b, _ := json.Marshal(map[string]any{"id": "x", "choices": []any{}, "usage": u})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// testRouter builds and starts a Router over a memIndex on a real listener.
func testRouter(t *testing.T, cfg Config, idx *memIndex, tok tokenizer.Tokenizer) (*Router, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DebugHeaders = true
	cfg.InstanceRefreshInterval = 20 * time.Millisecond
	deps := Deps{Tokenizer: tok, Registry: reg}
	if idx != nil {
		deps.index = idx
	}
	r, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, reg
}

func defaultTok(t testing.TB) tokenizer.Tokenizer {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type reply struct {
	code     int
	instance string
	decision string
	body     string
}

func post(t *testing.T, url, path, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	br := bufio.NewReader(resp.Body)
	_, _ = io.Copy(&sb, br)
	return reply{code: resp.StatusCode, instance: resp.Header.Get(HeaderInstance), decision: resp.Header.Get(HeaderDecision), body: sb.String()}
}

// chatBody is a chat request with a shared system prompt and a user question.
func chatBody(system, question string, extra string) string {
	b, _ := json.Marshal(system)
	q, _ := json.Marshal(question)
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":%s},{"role":"user","content":%s}]%s}`,
		tokenizer.DefaultModelName, b, q, extra)
}

// longText is deterministic filler of about n words.
func longText(seed, n int) string {
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"}
	var b strings.Builder
	x := uint32(seed*2654435761 + 1)
	for i := range n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[x%uint32(len(words))])
	}
	return b.String()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fleetReady waits until the router sees n instances.
func fleetReady(t *testing.T, r *Router, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d instances", n), func() bool { return len(r.fleet.Load().list) == n })
}

// value reads a counter, gauge or histogram sample count without testutil.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// families counts the series of a metric name in reg.
func families(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
