package router

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/openai"
)

// fuzzRouter is a router over a hand-fed index with three instances, never started:
// routing is exercised without any HTTP.
func fuzzRouter(t testing.TB) *Router {
	idx := newMemIndex()
	for _, id := range []string{"a", "b", "c"} {
		idx.setInstance(instanceInfo{id: id, engineURL: "http://127.0.0.1:1", model: "Qwen/Qwen3-0.6B",
			adapters: []string{"lora"}, blockSize: 16, routable: true})
	}
	cfg := DefaultConfig()
	r, err := New(cfg, Deps{Tokenizer: defaultTok(t), Registry: prometheus.NewRegistry(), index: idx})
	if err != nil {
		t.Fatal(err)
	}
	r.refresh()
	return r
}

// FuzzRouteRequest: any body either fails to parse with an OpenAI 4xx error, or routes
// (or fails with a router error) without panicking; and a parsed body re-encoded with
// another field order and spacing routes to the same instance.
func FuzzRouteRequest(f *testing.F) {
	f.Add([]byte(chatBody("system prompt", "hi", "")), true)
	f.Add([]byte(`{"model":"Qwen/Qwen3-0.6B","prompt":"once upon a time","cache_salt":"s"}`), false)
	f.Add([]byte(`{"model":"lora","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18]}`), false)
	f.Add([]byte(`{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"prompt_cache_key":"g"}`), true)
	f.Add([]byte(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`), true)
	f.Add([]byte(`{"model":`), true)
	r := fuzzRouter(f)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		parse := openai.ParseCompletion
		if chat {
			parse = openai.ParseChat
		}
		req, err := parse(body)
		if err != nil {
			if ae := apiError(err); ae.Status != http.StatusBadRequest {
				t.Fatalf("parse error maps to %d: %v", ae.Status, err)
			}
			return
		}
		first, err := route(r, req)
		if err != nil {
			return
		}
		var generic map[string]any
		if json.Unmarshal(body, &generic) != nil {
			return
		}
		re, _ := json.MarshalIndent(generic, " ", "\t") // sorted keys, other spacing
		req2, err := parse(re)
		if err != nil {
			return // e.g. numbers that do not survive float64
		}
		second, err := route(r, req2)
		if err != nil || second != first {
			t.Fatalf("re-encoded body routed to %q (%v), original to %q", second, err, first)
		}
	})
}

func route(r *Router, req *openai.Request) (string, error) {
	d, err := r.routeOpenAI(context.Background(), http.Header{}, req, time.Unix(1000, 0))
	if err != nil {
		return "", err
	}
	defer r.release(d.st)
	return d.inst().id, nil
}

// FuzzSSERelay: however the upstream stream is cut into reads, the client receives the
// same bytes, and usage is read the same.
func FuzzSSERelay(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\ndata: [DONE]\n\n"), 7, true)
	f.Add([]byte("data: x\n\n\n\ndata: y"), 3, false)
	f.Fuzz(func(t *testing.T, stream []byte, cut int, strip bool) {
		run := func(parts ...[]byte) ([]byte, outcome) {
			var w bytes.Buffer
			out := outcome{engineCached: -1, promptTokens: -1}
			s := sseRelay{w: &w, strip: strip, out: &out}
			for _, p := range parts {
				if err := s.feed(p); err != nil {
					t.Fatal(err)
				}
			}
			s.finish()
			return w.Bytes(), out
		}
		whole, o1 := run(stream)
		if cut < 0 {
			cut = -cut
		}
		if len(stream) > 0 {
			cut %= len(stream) + 1
		} else {
			cut = 0
		}
		split, o2 := run(stream[:cut], stream[cut:])
		if !bytes.Equal(whole, split) || o1 != o2 {
			t.Fatalf("split at %d changed the output:\n%q\n%q", cut, whole, split)
		}
		if !strip && !bytes.Equal(whole, stream) {
			t.Fatalf("without stripping the stream must pass unchanged:\n%q\n%q", stream, whole)
		}
	})
}
