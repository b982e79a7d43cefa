package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvroute/kvroute/tokenizer"
)

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

type apiErr struct {
	Error struct {
		Message, Type string
	}
}

func idsJSON(ids []uint32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

type completion struct {
	Object  string
	Model   string
	Choices []struct {
		Text         string
		FinishReason string `json:"finish_reason"`
		Message      struct{ Role, Content string }
	}
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
}

func TestHTTPTokenIDCompletions(t *testing.T) {
	cfg := testConfig()
	cfg.LoRAAdapters = []string{"sql-lora"}
	s := startServer(t, cfg)
	prompt := idsJSON(seqTokens(1, 40))
	for i, wantCached := range []int{0, 32} {
		resp, b := post(t, s.URL()+"/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":`+prompt+`,"max_tokens":5}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var c completion
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "text_completion" || c.Usage.PromptTokens != 40 || c.Usage.CompletionTokens != 5 ||
			c.Usage.TotalTokens != 45 || c.Usage.PromptTokensDetails.CachedTokens != wantCached ||
			c.Choices[0].FinishReason != "length" || c.Choices[0].Text == "" {
			t.Fatalf("request %d: %s", i, b)
		}
		if resp.Header.Get(HeaderTTFT) == "" || resp.Header.Get(HeaderWallTTFT) == "" {
			t.Fatalf("missing timing headers: %v", resp.Header)
		}
	}
	// The adapter is served and salts the hashes: no hit on the base model's blocks.
	_, b := post(t, s.URL()+"/v1/completions", `{"model":"sql-lora","prompt":`+prompt+`,"max_tokens":1}`)
	var c completion
	_ = json.Unmarshal(b, &c)
	if c.Model != "sql-lora" || c.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("adapter request: %s", b)
	}

	// Errors in OpenAI's shape.
	for _, tc := range []struct {
		body, typ string
		status    int
	}{
		{`{"model":"nope","prompt":[1,2]}`, "NotFoundError", 404},
		{`{"model":"Qwen/Qwen3-0.6B","prompt":[1,2],"max_tokens":9000}`, "BadRequestError", 400},
		{`{"model":"Qwen/Qwen3-0.6B","prompt":"text needs a tokenizer"}`, "BadRequestError", 400},
		{`{"model":"Qwen/Qwen3-0.6B"}`, "invalid_request_error", 400},
		{`not json`, "", 400},
		{`{"model":"Qwen/Qwen3-0.6B","prompt":[[1,2],[3,4]]}`, "invalid_request_error", 400},
	} {
		resp, b := post(t, s.URL()+"/v1/completions", tc.body)
		var e apiErr
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tc.status || (tc.typ != "" && e.Error.Type != tc.typ) || e.Error.Message == "" {
			t.Errorf("%s: status %d body %s", tc.body, resp.StatusCode, b)
		}
	}
	if _, b := post(t, s.URL()+"/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":[1,2],"max_tokens":9000}`); !strings.Contains(string(b), "maximum context length is 8192 tokens") {
		t.Errorf("too-long message: %s", b)
	}
}

// sse reads an SSE response into its data payloads.
func sse(t *testing.T, r io.Reader) (chunks []map[string]any, done bool, err error) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, m)
	}
	return chunks, done, sc.Err()
}

func TestHTTPStreaming(t *testing.T) {
	s := startServer(t, testConfig())
	resp, err := http.Post(s.URL()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"Qwen/Qwen3-0.6B","prompt":`+idsJSON(seqTokens(1, 20))+`,"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	chunks, done, err := sse(t, resp.Body)
	if err != nil || !done {
		t.Fatalf("stream: done=%v err=%v", done, err)
	}
	var text strings.Builder
	finish := ""
	for _, c := range chunks[:len(chunks)-1] {
		ch := c["choices"].([]any)[0].(map[string]any)
		text.WriteString(ch["text"].(string))
		if fr, ok := ch["finish_reason"].(string); ok {
			finish = fr
		}
	}
	usage := chunks[len(chunks)-1]["usage"].(map[string]any)
	if finish != "length" || usage["completion_tokens"].(float64) != 6 || len(strings.Fields(text.String())) != 6 {
		t.Fatalf("stream text %q finish %q usage %v", text.String(), finish, usage)
	}
}

func TestHTTPModelsMetricsHealthReset(t *testing.T) {
	cfg := testConfig()
	cfg.LoRAAdapters = []string{"a1", "a2"}
	s := startServer(t, cfg)
	resp, err := http.Get(s.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct{ ID, Root string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{DefaultModel, "a1", "a2"}) {
		t.Fatalf("models %v", ids)
	}
	if resp, _ := http.Get(s.URL() + "/health"); resp.StatusCode != 200 {
		t.Fatalf("health %d", resp.StatusCode)
	}
	generate(t, s, seqTokens(1, 64), "", "", 1)
	generate(t, s, seqTokens(1, 64), "", "", 1)
	resp, err = http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 128`,
		`vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 48`,
		`vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 0`,
		`vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0`,
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen3-0.6B"} 2`,
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="Qwen/Qwen3-0.6B"} 2`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if len(s.KVBlockKeys()) == 0 {
		t.Fatal("nothing cached")
	}
	if resp, b := post(t, s.URL()+"/reset_prefix_cache", ""); resp.StatusCode != 200 {
		t.Fatalf("reset: %d %s", resp.StatusCode, b)
	}
	if n := len(s.KVBlockKeys()); n != 0 {
		t.Fatalf("%d blocks after reset", n)
	}
}

func TestResetRefusedWhileRunning(t *testing.T) {
	cfg := testConfig()
	cfg.TimeScale = 1
	s := startServer(t, cfg)
	r, err := s.submit(seqTokens(1, 32), "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the request to run", func() bool { running, _, _ := s.Load(); return running == 1 })
	if resp, b := post(t, s.URL()+"/reset_prefix_cache", ""); resp.StatusCode != http.StatusConflict {
		t.Fatalf("reset while running: %d %s", resp.StatusCode, b)
	}
	s.eng.cancel(r)
	eventually(t, "the cancelled request to leave", func() bool { running, _, _ := s.Load(); return running == 0 })
}

var (
	tokOnce sync.Once
	tokVal  *tokenizer.Model
	tokErr  error
)

func realTokenizer(t *testing.T) *tokenizer.Model {
	t.Helper()
	if testing.Short() || raceEnabled {
		t.Skip("loading the embedded tokenizer takes 20-30 s under -race; run without -race")
	}
	tokOnce.Do(func() { tokVal, tokErr = tokenizer.Default() })
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return tokVal
}

// Text and chat prompts go through the injected tokenizer exactly as /tokenize reports,
// and the blocks the engine caches are the kvblock keys of those very tokens.
func TestHTTPTextAndChatWithTokenizer(t *testing.T) {
	tok := realTokenizer(t)
	s, err := New(testConfig(), tok, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	messages := `[{"role":"system","content":"` + strings.Repeat("You are a careful assistant. ", 20) + `"},{"role":"user","content":"Tell me about foxes."}]`
	_, b := post(t, s.URL()+"/tokenize", `{"model":"Qwen/Qwen3-0.6B","messages":`+messages+`}`)
	var tk struct {
		Count  int
		Tokens []uint32
	}
	if err := json.Unmarshal(b, &tk); err != nil || tk.Count == 0 || tk.Count != len(tk.Tokens) {
		t.Fatalf("tokenize: %s", b)
	}
	for i, wantCached := range []int{0, (tk.Count - 1) / 16 * 16} {
		resp, b := post(t, s.URL()+"/v1/chat/completions", `{"model":"Qwen/Qwen3-0.6B","messages":`+messages+`,"max_tokens":1}`)
		var c completion
		if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
			t.Fatalf("chat %d: %d %s", i, resp.StatusCode, b)
		}
		if c.Object != "chat.completion" || c.Usage.PromptTokens != tk.Count || c.Usage.PromptTokensDetails.CachedTokens != wantCached || c.Choices[0].Message.Role != "assistant" {
			t.Fatalf("chat %d: %s", i, b)
		}
	}
	want := sortedUnique(expectedKeys(DefaultModel, "", "", tk.Tokens, 16))
	if got := s.KVBlockKeys(); !slices.Equal(got, want) {
		t.Fatalf("cached keys %x, want the keys of /tokenize's tokens %x", got, want)
	}
	// Streaming chat: the role first, then content deltas, finish_reason, [DONE].
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"Qwen/Qwen3-0.6B","messages":`+messages+`,"max_tokens":4,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	chunks, done, err := sse(t, resp.Body)
	resp.Body.Close()
	if err != nil || !done || len(chunks) < 2 {
		t.Fatalf("chat stream: %d chunks, done=%v, err=%v", len(chunks), done, err)
	}
	first := chunks[0]["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
	last := chunks[len(chunks)-1]["choices"].([]any)[0].(map[string]any)
	if chunks[0]["object"] != "chat.completion.chunk" || first["role"] != "assistant" || last["finish_reason"] != "length" {
		t.Fatalf("chat stream chunks: %v", chunks)
	}
	// A text prompt and /detokenize.
	_, b = post(t, s.URL()+"/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":"Hello world, this is a fox.","max_tokens":2}`)
	var c completion
	if err := json.Unmarshal(b, &c); err != nil || c.Usage.PromptTokens == 0 || strings.TrimSpace(c.Choices[0].Text) == "" {
		t.Fatalf("text completion: %s", b)
	}
	_, b = post(t, s.URL()+"/detokenize", `{"model":"Qwen/Qwen3-0.6B","tokens":`+idsJSON(tk.Tokens)+`}`)
	var dt struct{ Prompt string }
	if err := json.Unmarshal(b, &dt); err != nil || !strings.Contains(dt.Prompt, "Tell me about foxes.") {
		t.Fatalf("detokenize: %s", b)
	}
}
