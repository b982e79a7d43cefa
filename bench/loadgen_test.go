package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// sseEngine is a real HTTP server speaking OpenAI's streaming chunk format.
type sseEngine struct {
	mu       sync.Mutex
	order    []string // "start:ID" / "end:ID" by the request's "n" field
	delay    time.Duration
	failPath string
}

func (e *sseEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []Message `json:"messages"`
		Stream   bool      `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil || !req.Stream {
		http.Error(w, `{"error":{"message":"bad"}}`, http.StatusBadRequest)
		return
	}
	tag := req.Messages[len(req.Messages)-1].Content
	if tag == "fail" {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusServiceUnavailable)
		return
	}
	e.mu.Lock()
	e.order = append(e.order, "start:"+tag)
	e.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set(HeaderInstance, "engine-a")
	w.Header().Set(HeaderDecision, "cache_hit")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	fl.Flush()
	time.Sleep(e.delay)
	for i := 0; i < 3; i++ {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n")
		fl.Flush()
	}
	fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n")
	e.mu.Lock()
	e.order = append(e.order, "end:"+tag)
	e.mu.Unlock()
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func tinyTrace(tags ...string) *Trace {
	t := &Trace{Engines: 1}
	for i, tag := range tags {
		chain, turn := i, 0
		if strings.HasPrefix(tag, "s") { // "s1", "s2": one session
			chain, turn = 1000, int(tag[1]-'0')
		}
		t.Requests = append(t.Requests, Request{ID: i, At: time.Duration(i) * 10 * time.Millisecond, Chain: chain, Turn: turn, Path: PathChat,
			Body: chatBody("m", []Message{{Role: "user", Content: tag}}, 3)})
	}
	return t
}

func TestDriverMeasuresStreams(t *testing.T) {
	for _, conc := range []int{0, 2} {
		t.Run(fmt.Sprintf("concurrency=%d", conc), func(t *testing.T) {
			eng := &sseEngine{delay: 20 * time.Millisecond}
			srv := httptest.NewServer(eng)
			defer srv.Close()
			var dispatched []int
			var mu sync.Mutex
			d := &Driver{BaseURL: srv.URL, Client: srv.Client(), TimeScale: 0.5, Concurrency: conc,
				OnDispatch: func(n int) { mu.Lock(); dispatched = append(dispatched, n); mu.Unlock() },
				Progress:   NewProgress(io.Discard, "test", 5)}
			tr := tinyTrace("a", "s0", "fail", "s1", "b")
			rr, err := d.Run(context.Background(), tr)
			samples, wall := rr.Samples, rr.Wall
			if err != nil {
				t.Fatal(err)
			}
			if rr.LoadEnd <= 0 || rr.LoadEnd > wall {
				t.Fatalf("load end %v, want in (0, wall %v]", rr.LoadEnd, wall)
			}
			if len(samples) != 5 || len(dispatched) != 5 || wall <= 0 {
				t.Fatalf("%d samples, %d dispatches, wall %v", len(samples), len(dispatched), wall)
			}
			for i, s := range samples {
				if s.ID != i {
					t.Fatalf("sample %d has id %d", i, s.ID)
				}
				if i == 2 {
					if s.OK() || s.Status != http.StatusServiceUnavailable || !strings.Contains(s.Err, "503") {
						t.Fatalf("failing request: %+v", s)
					}
					continue
				}
				if !s.OK() {
					t.Fatalf("request %d failed: %+v", i, s)
				}
				// The first chunk has empty content; TTFT waits for real content after the delay.
				if s.TTFT < 20*time.Millisecond || s.Latency < s.TTFT {
					t.Fatalf("request %d: TTFT %v latency %v, want TTFT ≥ 20ms ≤ latency", i, s.TTFT, s.Latency)
				}
				if s.PromptTokens != 100 || s.CachedTokens != 64 || s.CompletionTokens != 3 || s.Instance != "engine-a" || s.Decision != "cache_hit" {
					t.Fatalf("request %d: usage/headers not read: %+v", i, s)
				}
			}
			// The session's second turn starts only after the first ended.
			eng.mu.Lock()
			defer eng.mu.Unlock()
			pos := map[string]int{}
			for i, ev := range eng.order {
				pos[ev] = i
			}
			if pos["start:s1"] < pos["end:s0"] {
				t.Fatalf("turn 1 started before turn 0 ended: %v", eng.order)
			}
		})
	}
}

func TestDriverOpenLoopSchedule(t *testing.T) {
	eng := &sseEngine{}
	srv := httptest.NewServer(eng)
	defer srv.Close()
	tr := tinyTrace("a", "b")
	tr.Requests[1].At = 2 * time.Second // × 0.05 = 100 ms wall
	d := &Driver{BaseURL: srv.URL, Client: srv.Client(), TimeScale: 0.05}
	rr, err := d.Run(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	samples := rr.Samples
	if rr.LoadEnd <= samples[0].Start || rr.LoadEnd > samples[1].Start {
		t.Fatalf("open loop: load end %v, want the last dispatch (just before %v, after %v)", rr.LoadEnd, samples[1].Start, samples[0].Start)
	}
	if gap := samples[1].Start - samples[0].Start; gap < 90*time.Millisecond {
		t.Fatalf("second request sent %v after the first, want ≈ 100ms (2 s simulated × 0.05)", gap)
	}
}

func TestDriverErrors(t *testing.T) {
	if _, err := (&Driver{}).Run(context.Background(), tinyTrace("a")); err == nil {
		t.Fatal("no base URL: want an error")
	}
	if _, err := (&Driver{BaseURL: "http://x", Client: http.DefaultClient}).Run(context.Background(), tinyTrace("a")); err == nil {
		t.Fatal("time scale 0: want an error")
	}
	// A connection refused is a failed sample, not a crash.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rr, err := (&Driver{BaseURL: url, Client: http.DefaultClient, TimeScale: 1}).Run(context.Background(), tinyTrace("a"))
	samples := rr.Samples
	if err != nil || samples[0].OK() || samples[0].Err == "" {
		t.Fatalf("refused connection: err %v sample %+v", err, samples[0])
	}
	// A stream cut before [DONE] is an error.
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
	}))
	defer cut.Close()
	rr, _ = (&Driver{BaseURL: cut.URL, Client: cut.Client(), TimeScale: 1}).Run(context.Background(), tinyTrace("a"))
	samples = rr.Samples
	if samples[0].OK() || !strings.Contains(samples[0].Err, "[DONE]") {
		t.Fatalf("cut stream: %+v", samples[0])
	}
	// A cancelled run returns ctx's error and marks unsent requests.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rr, err = (&Driver{BaseURL: cut.URL, Client: cut.Client(), TimeScale: 1}).Run(ctx, tinyTrace("a", "b"))
	samples = rr.Samples
	if err == nil || samples[1].Err != "not sent" {
		t.Fatalf("cancelled: err %v, sample %+v", err, samples[1])
	}
}
