package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// fakeVLLM speaks vLLM's /tokenize JSON, tokenizing with the embedded Qwen3 model
// the way vLLM does (chat: render + add_special_tokens as sent; completion: the prompt).
func fakeVLLM(t *testing.T) *httptest.Server {
	m := mustDefault(t)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Model               string           `json:"model"`
			Prompt              *string          `json:"prompt"`
			Messages            []map[string]any `json:"messages"`
			AddGenerationPrompt bool             `json:"add_generation_prompt"`
			AddSpecialTokens    *bool            `json:"add_special_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		if body.Model != DefaultModelName {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"object":"error","message":"The model does not exist.","code":404}`))
			return
		}
		var ids []uint32
		var err error
		if body.Prompt != nil {
			ids, err = m.Encode(*body.Prompt, body.AddSpecialTokens == nil || *body.AddSpecialTokens)
		} else {
			var res Result
			res, err = m.Chat(r.Context(), body.Model, &ChatRequest{Messages: body.Messages, AddGenerationPrompt: body.AddGenerationPrompt,
				AddSpecialTokens: body.AddSpecialTokens != nil && *body.AddSpecialTokens})
			ids = res.IDs
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": 40960, "tokens": ids})
	}))
}

func TestEngine(t *testing.T) {
	srv := fakeVLLM(t)
	defer srv.Close()
	e := NewEngine(srv.URL+"/", srv.Client())
	m := mustDefault(t)
	ctx := context.Background()

	res, err := e.Completion(ctx, DefaultModelName, "Hello, world!", true)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := m.Encode("Hello, world!", true)
	if !reflect.DeepEqual(res.IDs, want) || res.Prompt != "" {
		t.Fatalf("completion %+v, want ids %v", res, want)
	}

	req := &ChatRequest{Messages: []map[string]any{{"role": "user", "content": "Hi"}}, AddGenerationPrompt: true}
	res, err = e.Chat(ctx, DefaultModelName, req)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := m.Chat(ctx, DefaultModelName, req)
	if !reflect.DeepEqual(res.IDs, local.IDs) {
		t.Fatalf("chat ids %v, local %v", res.IDs, local.IDs)
	}

	_, err = e.Completion(ctx, "no-such-model", "x", false)
	if !errors.Is(err, ErrEngine) {
		t.Fatalf("unknown model: %v", err)
	}
	srv.Close()
	if _, err := e.Completion(ctx, DefaultModelName, "x", false); !errors.Is(err, ErrEngine) {
		t.Fatalf("closed server: %v", err)
	}
}

func TestEngineBadResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"count": 3, "tokens": [1, 2]}`))
	}))
	defer srv.Close()
	_, err := NewEngine(srv.URL, nil).Completion(context.Background(), "m", "x", false)
	if !errors.Is(err, ErrEngine) {
		t.Fatalf("inconsistent count: %v", err)
	}
}
