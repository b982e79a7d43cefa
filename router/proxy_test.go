package router

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

type apiErr struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   string `json:"param"`
		Code    string `json:"code"`
	} `json:"error"`
}

func decodeErr(t *testing.T, body string) apiErr {
	t.Helper()
	var e apiErr
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error body: %q (%v)", body, err)
	}
	return e
}

// Malformed, huge, wrongly typed and unroutable requests get OpenAI errors with the
// right status, and nothing reaches an engine.
func TestClientErrors(t *testing.T) {
	idx, es := threeEngines(t)
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	r, _ := testRouter(t, cfg, idx, defaultTok(t))
	fleetReady(t, r, 3)
	cases := []struct {
		name, path, body, ctype string
		status                  int
		param                   string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model": "Qwen/Qwen3-0.6B", "messages": [`, "application/json", 400, ""},
		{"not an object", "/v1/chat/completions", `[1,2]`, "application/json", 400, ""},
		{"missing model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, "application/json", 400, "model"},
		{"missing messages", "/v1/chat/completions", `{"model":"Qwen/Qwen3-0.6B"}`, "application/json", 400, "messages"},
		{"bad prompt", "/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":{"x":1}}`, "application/json", 400, "prompt"},
		{"bad token id", "/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":[1,-2]}`, "application/json", 400, "prompt"},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, "application/json", 404, "model"},
		{"too large", "/v1/chat/completions", chatBody(strings.Repeat("x", 70<<10), "q", ""), "application/json", 413, ""},
		{"wrong content type", "/v1/chat/completions", chatBody("s", "q", ""), "text/plain", 415, ""},
		{"form content type", "/v1/completions", `model=x`, "application/x-www-form-urlencoded", 415, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, r.URL()+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", c.ctype)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var sb strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, sb.String())
			}
			e := decodeErr(t, sb.String())
			if c.param != "" && e.Error.Param != c.param {
				t.Fatalf("param %q, want %q", e.Error.Param, c.param)
			}
		})
	}
	for path, want := range map[string]int{"/v1/chat/completions": 405, "/v1/embeddings": 404} {
		resp, err := http.Get(r.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		decodeErr(t, sb.String())
	}
	for _, e := range es {
		if n := e.requests.Load(); n != 0 {
			t.Fatalf("engine %s got %d requests from rejected input", e.id, n)
		}
	}
}

// 429 when every instance is past the hard limit.
func TestHardLimit429(t *testing.T) {
	idx := newMemIndex()
	e := newTestEngine(t, "only", defaultTok(t), idx)
	cfg := DefaultConfig()
	cfg.ConcurrencyThreshold = 1
	cfg.HardInFlightLimit = 1
	r, _ := testRouter(t, cfg, idx, defaultTok(t))
	fleetReady(t, r, 1)
	release := make(chan struct{})
	e.hold.Store(&release)
	done := make(chan reply)
	go func() { done <- post(t, r.URL(), "/v1/chat/completions", chatBody("s", "first", "")) }()
	waitFor(t, "one in flight", func() bool { return r.fleet.Load().byID["only"].inFlight.Load() == 1 })
	rep := post(t, r.URL(), "/v1/chat/completions", chatBody("s", "second", ""))
	e.hold.Store(nil)
	close(release)
	if first := <-done; first.code != 200 {
		t.Fatalf("held request: %d", first.code)
	}
	if rep.code != 429 {
		t.Fatalf("past the hard limit: %d %s, want 429", rep.code, rep.body)
	}
	if e := decodeErr(t, rep.body); e.Error.Type != "rate_limit_error" {
		t.Fatalf("429 type %q", e.Error.Type)
	}
}

// Upstream failures: connection refused → 502 (then 503 once ejected); slow first byte
// → 504; an engine 5xx is retried once on another instance before any byte was sent.
func TestUpstreamFailures(t *testing.T) {
	t.Run("retry on 5xx", func(t *testing.T) {
		idx, es := threeEngines(t)
		r, _ := testRouter(t, DefaultConfig(), idx, defaultTok(t))
		fleetReady(t, r, 3)
		body := chatBody(longText(9, 50), "q", "")
		first := post(t, r.URL(), "/v1/chat/completions", body)
		bad := engineByID(es, first.instance)
		bad.fail5xx.Store(1)
		rep := post(t, r.URL(), "/v1/chat/completions", body)
		if rep.code != 200 || rep.instance == bad.id {
			t.Fatalf("retry: %d on %s (failed engine %s)", rep.code, rep.instance, bad.id)
		}
		if got := value(t, r.metrics.retries); got != 1 {
			t.Fatalf("retries_total %v, want 1", got)
		}
		if got := value(t, r.metrics.upstreamErrors.WithLabelValues(bad.id, "status_5xx")); got != 1 {
			t.Fatalf("upstream_errors_total{status_5xx} %v, want 1", got)
		}
	})
	t.Run("502 then 503", func(t *testing.T) {
		idx := newMemIndex()
		e := newTestEngine(t, "dead", defaultTok(t), idx)
		cfg := DefaultConfig()
		cfg.EjectFailures = 2
		r, _ := testRouter(t, cfg, idx, defaultTok(t))
		fleetReady(t, r, 1)
		e.srv.Close()
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody("s", "q", ""))
		if rep.code != 502 {
			t.Fatalf("dead engine: %d %s, want 502", rep.code, rep.body)
		}
		decodeErr(t, rep.body)
		_ = post(t, r.URL(), "/v1/chat/completions", chatBody("s", "q", ""))
		rep = post(t, r.URL(), "/v1/chat/completions", chatBody("s", "q", ""))
		if rep.code != 503 {
			t.Fatalf("ejected engine: %d %s, want 503", rep.code, rep.body)
		}
		if got := value(t, r.metrics.ejected.WithLabelValues("dead")); got != 1 {
			t.Fatalf("instance_ejected %v", got)
		}
	})
	t.Run("504 on slow first byte", func(t *testing.T) {
		idx := newMemIndex()
		e := newTestEngine(t, "slow", defaultTok(t), idx)
		e.delay.Store(int64(2 * time.Second))
		cfg := DefaultConfig()
		cfg.FirstByteTimeout = 100 * time.Millisecond
		r, _ := testRouter(t, cfg, idx, defaultTok(t))
		fleetReady(t, r, 1)
		rep := post(t, r.URL(), "/v1/chat/completions", chatBody("s", "q", ""))
		if rep.code != 504 {
			t.Fatalf("slow engine: %d %s, want 504", rep.code, rep.body)
		}
		decodeErr(t, rep.body)
	})
}

// An instance that dies mid-stream gives the client an SSE error event, and later
// requests avoid it.
func TestMidStreamDeath(t *testing.T) {
	idx, es := threeEngines(t)
	cfg := DefaultConfig()
	cfg.EjectFailures = 1
	r, _ := testRouter(t, cfg, idx, defaultTok(t))
	fleetReady(t, r, 3)
	body := chatBody(longText(5, 300), "q", `,"stream":true`)
	first := post(t, r.URL(), "/v1/chat/completions", body)
	victim := engineByID(es, first.instance)
	victim.breakMid.Store(true)
	rep := post(t, r.URL(), "/v1/chat/completions", body)
	if rep.instance != victim.id {
		t.Fatalf("second request went to %s, want the holder %s", rep.instance, victim.id)
	}
	if !strings.Contains(rep.body, `data: {"id":"x"`) || !strings.Contains(rep.body, `"error"`) || !strings.Contains(rep.body, "mid-stream") {
		t.Fatalf("client stream lacks the first chunk or the error event:\n%s", rep.body)
	}
	for i := range 5 {
		rep := post(t, r.URL(), "/v1/chat/completions", body)
		if rep.code != 200 || rep.instance == victim.id {
			t.Fatalf("request %d after the failure: %d on %s", i, rep.code, rep.instance)
		}
		if strings.Contains(rep.body, `"error"`) {
			t.Fatalf("request %d: %s", i, rep.body)
		}
	}
}

// The router asks for the usage chunk itself and strips it unless the client asked.
func TestStreamUsageChunk(t *testing.T) {
	idx, es := threeEngines(t)
	r, _ := testRouter(t, DefaultConfig(), idx, defaultTok(t))
	fleetReady(t, r, 3)
	sys := longText(6, 200)
	plain := post(t, r.URL(), "/v1/chat/completions", chatBody(sys, "q", `,"stream":true`))
	if plain.code != 200 || strings.Contains(plain.body, `"prompt_tokens"`) || !strings.HasSuffix(plain.body, "data: [DONE]\n\n") {
		t.Fatalf("client without include_usage:\n%s", plain.body)
	}
	if !strings.Contains(string(engineByID(es, plain.instance).lastBody.Load().([]byte)), `"include_usage":true`) {
		t.Fatal("router did not ask the engine for usage")
	}
	if got := value(t, r.metrics.engineCached); got != 0 {
		t.Fatalf("first request cached %v", got)
	}
	asked := post(t, r.URL(), "/v1/chat/completions", chatBody(sys, "q2", `,"stream":true,"stream_options":{"include_usage":true}`))
	if !strings.Contains(asked.body, `"prompt_tokens_details"`) {
		t.Fatalf("client with include_usage lost the usage chunk:\n%s", asked.body)
	}
	refused := post(t, r.URL(), "/v1/chat/completions", chatBody(sys, "q3", `,"stream":true,"stream_options":{"include_usage":false}`))
	if strings.Contains(refused.body, `"prompt_tokens"`) {
		t.Fatalf("client with include_usage=false got usage:\n%s", refused.body)
	}
	if got := value(t, r.metrics.engineCached); got == 0 {
		t.Fatal("engine cached tokens not read from the stream")
	}
}

// Completions with token-id prompts need no tokenizer; /v1/models is the fleet union;
// /invocations hashes the raw body.
func TestCompletionsModelsInvocations(t *testing.T) {
	idx, es := threeEngines(t, "lora-a")
	cfg := DefaultConfig()
	cfg.TokenizerMode = TokenizerNone
	r, _ := testRouter(t, cfg, idx, nil)
	fleetReady(t, r, 3)
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprint(1000 + i)
	}
	body := fmt.Sprintf(`{"model":"Qwen/Qwen3-0.6B","prompt":[%s],"max_tokens":2}`, strings.Join(ids, ","))
	a := post(t, r.URL(), "/v1/completions", body)
	b := post(t, r.URL(), "/v1/completions", body)
	if a.code != 200 || b.instance != a.instance || b.decision != "cache_hit" {
		t.Fatalf("token-id completions: %d %s/%s %s", a.code, a.instance, b.instance, b.decision)
	}
	resp, err := http.Get(r.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 2 || models.Data[0].ID != "Qwen/Qwen3-0.6B" || models.Data[1].ID != "lora-a" || *models.Data[1].Parent != "Qwen/Qwen3-0.6B" {
		t.Fatalf("models: %+v", models.Data)
	}
	inv := `{"inputs":"` + strings.Repeat("shared context ", 100) + `","parameters":{}}`
	x := post(t, r.URL(), "/invocations", inv)
	y := post(t, r.URL(), "/invocations", inv[:len(inv)-15]+`,"n":2}}`)
	if x.code != 200 || x.instance != y.instance || x.decision != "affinity" {
		t.Fatalf("invocations: %d %s %s / %s", x.code, x.instance, x.decision, y.instance)
	}
	if got := string(engineByID(es, x.instance).lastBody.Load().([]byte)); !strings.HasPrefix(got, `{"inputs":`) {
		t.Fatalf("invocation body not forwarded untouched: %.40q", got)
	}
}

// A client that disconnects cancels the upstream request.
func TestClientCancelStopsUpstream(t *testing.T) {
	idx := newMemIndex()
	e := newTestEngine(t, "e", defaultTok(t), idx)
	release := make(chan struct{})
	defer close(release)
	e.hold.Store(&release)
	r, _ := testRouter(t, DefaultConfig(), idx, defaultTok(t))
	fleetReady(t, r, 1)
	conn, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := chatBody("s", "q", `,"stream":true`)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	in := r.fleet.Load().byID["e"]
	waitFor(t, "request in flight", func() bool { return in.inFlight.Load() == 1 })
	conn.Close()
	waitFor(t, "upstream cancelled", func() bool { return in.inFlight.Load() == 0 })
}

// A client that sends its body too slowly gets 408 and the engine sees nothing.
func TestSlowClientBody(t *testing.T) {
	idx := newMemIndex()
	e := newTestEngine(t, "e", defaultTok(t), idx)
	cfg := DefaultConfig()
	cfg.BodyReadTimeout = 200 * time.Millisecond
	r, _ := testRouter(t, cfg, idx, defaultTok(t))
	fleetReady(t, r, 1)
	conn, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("slow body: %d, want 408", resp.StatusCode)
	}
	if e.requests.Load() != 0 {
		t.Fatal("engine got the partial request")
	}
}
