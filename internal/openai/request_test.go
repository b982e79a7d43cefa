package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/tokenizer"
)

func TestParseChatDefaults(t *testing.T) {
	r, err := ParseChat([]byte(`{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":5,"cache_salt":"t1","prompt_cache_key":"g","stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != KindChat || r.Model != "m" || !r.Stream || !r.StreamIncludeUsage || r.MaxTokens != 5 || r.CacheSalt != "t1" || r.PromptCacheKey != "g" {
		t.Fatalf("fields: %+v", r)
	}
	if !r.AddGenerationPrompt || r.AddSpecialTokens {
		t.Fatalf("vLLM chat defaults: add_generation_prompt=true add_special_tokens=false, got %v %v", r.AddGenerationPrompt, r.AddSpecialTokens)
	}
	if got := r.CanonicalText(); got != "system\x1fS\x1euser\x1fa\nb\x1e" {
		t.Fatalf("canonical %q", got)
	}
}

func TestParseCompletionPromptForms(t *testing.T) {
	cases := []struct {
		body  string
		text  string
		ids   []uint32
		batch int
	}{
		{`{"model":"m","prompt":"hello"}`, "hello", nil, 1},
		{`{"model":"m","prompt":[1,2,3]}`, "", []uint32{1, 2, 3}, 1},
		{`{"model":"m","prompt":["a","b"]}`, "a", nil, 2},
		{`{"model":"m","prompt":[[7,8],[9]]}`, "", []uint32{7, 8}, 2},
	}
	for _, c := range cases {
		r, err := ParseCompletion([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if r.Prompt != c.text || !reflect.DeepEqual(r.PromptIDs, c.ids) || r.BatchSize != c.batch || r.HasPromptIDs != (c.ids != nil) {
			t.Fatalf("%s: got %+v", c.body, r)
		}
		if !r.AddSpecialTokens {
			t.Fatalf("completion default add_special_tokens must be true")
		}
	}
}

func TestFieldOrderAndWhitespaceDoNotMatter(t *testing.T) {
	a := `{"model":"m","messages":[{"role":"user","content":"hi"}],"cache_salt":"s"}`
	b := "{\n  \"cache_salt\" : \"s\",\n\t\"messages\": [ { \"content\":\"hi\" , \"role\":\"user\" } ],\n \"model\":\"m\"\n}"
	ra, err := ParseChat([]byte(a))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := ParseChat([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ra, rb) {
		t.Fatalf("reordered body parsed differently:\n%+v\n%+v", ra, rb)
	}
}

func TestBadRequests(t *testing.T) {
	cases := []struct {
		name, body, param string
		chat              bool
	}{
		{"empty", ``, "", true},
		{"not object", `[1]`, "", true},
		{"malformed", `{"model":`, "", true},
		{"no model", `{"messages":[{"role":"user","content":"x"}]}`, "model", true},
		{"model wrong type", `{"model":5,"messages":[]}`, "model", true},
		{"no messages", `{"model":"m"}`, "messages", true},
		{"empty messages", `{"model":"m","messages":[]}`, "messages", true},
		{"no role", `{"model":"m","messages":[{"content":"x"}]}`, "messages[0].role", true},
		{"bad content", `{"model":"m","messages":[{"role":"user","content":5}]}`, "messages[0].content", true},
		{"bad part", `{"model":"m","messages":[{"role":"user","content":["x"]}]}`, "messages[0].content[0]", true},
		{"fractional max_tokens", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.5}`, "max_tokens", true},
		{"empty salt", `{"model":"m","messages":[{"role":"user","content":"x"}],"cache_salt":""}`, "cache_salt", true},
		{"no prompt", `{"model":"m"}`, "prompt", false},
		{"prompt number", `{"model":"m","prompt":5}`, "prompt", false},
		{"empty prompt list", `{"model":"m","prompt":[]}`, "prompt", false},
		{"negative id", `{"model":"m","prompt":[1,-2]}`, "prompt", false},
		{"mixed list", `{"model":"m","prompt":["a",[1]]}`, "prompt[1]", false},
	}
	for _, c := range cases {
		var err error
		if c.chat {
			_, err = ParseChat([]byte(c.body))
		} else {
			_, err = ParseCompletion([]byte(c.body))
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%s: want *Error, got %v", c.name, err)
		}
		if e.Status != http.StatusBadRequest || e.Param != c.param {
			t.Fatalf("%s: status %d param %q, want 400 %q (%s)", c.name, e.Status, e.Param, c.param, e.Message)
		}
	}
}

type recordingTokenizer struct {
	chat  *tokenizer.ChatRequest
	model string
}

func (r *recordingTokenizer) Chat(_ context.Context, model string, req *tokenizer.ChatRequest) (tokenizer.Result, error) {
	r.chat, r.model = req, model
	return tokenizer.Result{Prompt: "rendered", IDs: []uint32{1, 2}}, nil
}

func (r *recordingTokenizer) Completion(_ context.Context, model, prompt string, add bool) (tokenizer.Result, error) {
	r.model = model
	return tokenizer.Result{Prompt: prompt, IDs: []uint32{uint32(len(prompt))}}, nil
}

func TestTokenizeDelegates(t *testing.T) {
	tok := &recordingTokenizer{}
	r, _ := ParseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,"chat_template_kwargs":{"enable_thinking":false}}`))
	res, err := r.Tokenize(context.Background(), tok)
	if err != nil || res.Prompt != "rendered" || tok.model != "m" || tok.chat.AddGenerationPrompt || tok.chat.ChatTemplateKwargs["enable_thinking"] != false {
		t.Fatalf("chat delegation: %+v %v %+v", res, err, tok.chat)
	}
	ids, _ := ParseCompletion([]byte(`{"model":"m","prompt":[5,6]}`))
	res, err = ids.Tokenize(context.Background(), nil)
	if err != nil || !reflect.DeepEqual(res.IDs, []uint32{5, 6}) {
		t.Fatalf("token-id prompt must need no tokenizer: %v %v", res, err)
	}
	text, _ := ParseCompletion([]byte(`{"model":"m","prompt":"abc"}`))
	if _, err := text.Tokenize(context.Background(), nil); !errors.Is(err, ErrNoTokenizer) {
		t.Fatalf("text prompt without tokenizer: %v", err)
	}
}

func TestWriteErrorShape(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, BadRequest("model", "'model' is required"))
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d", rec.Code)
	}
	var body struct {
		Error struct{ Message, Type, Param string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Type != "invalid_request_error" || body.Error.Param != "model" || !strings.Contains(body.Error.Message, "model") {
		t.Fatalf("body %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	WriteError(rec, errors.New("boom"))
	if rec.Code != 500 {
		t.Fatalf("plain error status %d", rec.Code)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	f.Add([]byte(`{"model":"m","prompt":[[1,2],[3]]}`))
	f.Add([]byte(`{"model":"m","prompt":["a"],"cache_salt":"s","max_tokens":3}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (*Request, error){ParseChat, ParseCompletion} {
			r, err := parse(body)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Status != 400 {
					t.Fatalf("error is not a 400 *Error: %v", err)
				}
				continue
			}
			if r.Model == "" {
				t.Fatal("accepted a request without a model")
			}
			_ = r.CanonicalText()
		}
	})
}
