package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Engine implements Tokenizer by asking a vLLM server's POST /tokenize, for models
// with no local tokenizer. It is exact by construction (the engine tokenizes for
// itself) but costs one HTTP round trip per request. vLLM's /tokenize returns ids
// only, so Result.Prompt is empty.
type Engine struct {
	url string
	hc  *http.Client
	// MaxResponseBytes bounds the response body read (default 64 MiB).
	MaxResponseBytes int64
}

var _ Tokenizer = (*Engine)(nil)

// NewEngine returns an Engine for the vLLM server at baseURL (e.g.
// "http://10.0.0.5:8000"); hc nil means http.DefaultClient.
func NewEngine(baseURL string, hc *http.Client) *Engine {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Engine{url: strings.TrimRight(baseURL, "/") + "/tokenize", hc: hc, MaxResponseBytes: 64 << 20}
}

// tokenizeResponse is vLLM's /tokenize answer.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
}

// Completion sends the completion form {model, prompt, add_special_tokens}.
func (e *Engine) Completion(ctx context.Context, model string, prompt string, addSpecialTokens bool) (Result, error) {
	return e.do(ctx, map[string]any{"model": model, "prompt": prompt, "add_special_tokens": addSpecialTokens})
}

// Chat sends the chat form {model, messages, add_generation_prompt,
// continue_final_message, add_special_tokens, chat_template_kwargs, tools}.
func (e *Engine) Chat(ctx context.Context, model string, req *ChatRequest) (Result, error) {
	if req == nil {
		return Result{}, fmt.Errorf("%w: nil request", ErrEngine)
	}
	body := map[string]any{
		"model":                  model,
		"messages":               req.Messages,
		"add_generation_prompt":  req.AddGenerationPrompt,
		"continue_final_message": req.ContinueFinalMessage,
		"add_special_tokens":     req.AddSpecialTokens,
	}
	if req.Tools != nil {
		body["tools"] = req.Tools
	}
	if len(req.ChatTemplateKwargs) > 0 {
		body["chat_template_kwargs"] = req.ChatTemplateKwargs
	}
	return e.do(ctx, body)
}

func (e *Engine) do(ctx context.Context, body map[string]any) (Result, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode request: %v", ErrEngine, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(payload))
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := e.hc.Do(hreq)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, e.MaxResponseBytes+1))
	if err != nil {
		return Result{}, fmt.Errorf("%w: read response: %v", ErrEngine, err)
	}
	if int64(len(data)) > e.MaxResponseBytes {
		return Result{}, fmt.Errorf("%w: response over %d bytes", ErrEngine, e.MaxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return Result{}, fmt.Errorf("%w: %s: HTTP %d: %s", ErrEngine, e.url, resp.StatusCode, truncateForError(strings.TrimSpace(string(data))))
	}
	var tr tokenizeResponse
	if err := json.Unmarshal(data, &tr); err != nil {
		return Result{}, fmt.Errorf("%w: decode response: %v", ErrEngine, err)
	}
	if tr.Tokens == nil || tr.Count != len(tr.Tokens) {
		return Result{}, fmt.Errorf("%w: response has count %d and %d tokens", ErrEngine, tr.Count, len(tr.Tokens))
	}
	return Result{IDs: tr.Tokens}, nil
}
