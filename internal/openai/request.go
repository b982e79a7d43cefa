// Package openai parses the OpenAI-compatible request bodies kvroute routes and simulates
// (/v1/chat/completions and /v1/completions) into one typed Request, and writes errors in
// OpenAI's JSON error shape. It is shared by the router, the engine simulator and the
// index's lookup-by-body so that all three read a request the same way.
//
// Parsing is canonical by construction: the body is decoded into typed fields, so JSON
// whitespace and field order never change the result. The package does not tokenize by
// itself (Request.Tokenize delegates to a tokenizer.Tokenizer) and knows nothing about
// routing.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/kvroute/kvroute/tokenizer"
)

// Kind says which endpoint a request is for.
type Kind uint8

const (
	KindChat Kind = iota + 1
	KindCompletion
)

func (k Kind) String() string {
	switch k {
	case KindChat:
		return "chat"
	case KindCompletion:
		return "completion"
	}
	return "unknown"
}

// Request is a parsed request body: the fields that decide the prompt, the routing and the
// response shape. Fields the package does not name stay in the original body, which
// callers forward unchanged.
type Request struct {
	Kind   Kind
	Model  string
	Stream bool
	// StreamIncludeUsage is stream_options.include_usage.
	StreamIncludeUsage bool
	// MaxTokens is max_tokens (or max_completion_tokens for chat); 0 when unset.
	MaxTokens int
	// CacheSalt is vLLM's cache_salt request field; it salts the first block's hash.
	CacheSalt string
	// PromptCacheKey is OpenAI's prompt_cache_key; vLLM ignores it, kvroute uses it as a
	// routing group.
	PromptCacheKey string

	// Chat fields. Messages and Tools hold decoded JSON (map[string]any, []any, string,
	// float64, bool, nil), except that objects inside Tools and inside each message's
	// "tool_calls" are *tokenizer.Object, which keep their key order: chat templates print
	// them with tojson, and the reference prints keys in document order.
	Messages             []map[string]any
	Tools                []any
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	ChatTemplateKwargs   map[string]any

	// AddSpecialTokens: vLLM's default is false for chat and true for completions.
	AddSpecialTokens bool

	// Completion fields. A text prompt is in Prompt; a token-id prompt in PromptIDs with
	// HasPromptIDs set. BatchSize > 1 when the body held a list of prompts; the first is kept.
	Prompt       string
	PromptIDs    []uint32
	HasPromptIDs bool
	BatchSize    int
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wire struct {
	Model                *string          `json:"model"`
	Stream               bool             `json:"stream"`
	StreamOptions        *streamOptions   `json:"stream_options"`
	MaxTokens            *float64         `json:"max_tokens"`
	MaxCompletionTokens  *float64         `json:"max_completion_tokens"`
	CacheSalt            *string          `json:"cache_salt"`
	PromptCacheKey       *string          `json:"prompt_cache_key"`
	Messages             []map[string]any `json:"messages"`
	Tools                []any            `json:"tools"`
	AddGenerationPrompt  *bool            `json:"add_generation_prompt"`
	ContinueFinalMessage bool             `json:"continue_final_message"`
	ChatTemplateKwargs   map[string]any   `json:"chat_template_kwargs"`
	AddSpecialTokens     *bool            `json:"add_special_tokens"`
	Prompt               json.RawMessage  `json:"prompt"`
}

// ParseChat parses a /v1/chat/completions body.
func ParseChat(body []byte) (*Request, error) {
	w, err := decode(body)
	if err != nil {
		return nil, err
	}
	r, err := common(w)
	if err != nil {
		return nil, err
	}
	r.Kind = KindChat
	if w.Messages == nil {
		return nil, BadRequest("messages", "'messages' is required and must be an array of messages")
	}
	if len(w.Messages) == 0 {
		return nil, BadRequest("messages", "'messages' must not be empty")
	}
	for i, m := range w.Messages {
		if m == nil {
			return nil, BadRequest(fmt.Sprintf("messages[%d]", i), "each message must be an object")
		}
		if role, ok := m["role"].(string); !ok || role == "" {
			return nil, BadRequest(fmt.Sprintf("messages[%d].role", i), "each message needs a string 'role'")
		}
		switch c := m["content"].(type) {
		case nil, string:
		case []any:
			for j, p := range c {
				if _, ok := p.(map[string]any); !ok {
					return nil, BadRequest(fmt.Sprintf("messages[%d].content[%d]", i, j), "content parts must be objects")
				}
			}
		default:
			return nil, BadRequest(fmt.Sprintf("messages[%d].content", i), "content must be a string or an array of parts")
		}
	}
	r.Messages = w.Messages
	r.Tools = w.Tools
	r.AddGenerationPrompt = true
	if w.AddGenerationPrompt != nil {
		r.AddGenerationPrompt = *w.AddGenerationPrompt
	}
	r.ContinueFinalMessage = w.ContinueFinalMessage
	if r.ContinueFinalMessage && r.AddGenerationPrompt && w.AddGenerationPrompt != nil {
		return nil, BadRequest("continue_final_message", "continue_final_message and add_generation_prompt cannot both be true")
	}
	if r.ContinueFinalMessage {
		r.AddGenerationPrompt = false
	}
	r.ChatTemplateKwargs = w.ChatTemplateKwargs
	r.AddSpecialTokens = false
	if w.AddSpecialTokens != nil {
		r.AddSpecialTokens = *w.AddSpecialTokens
	}
	if w.MaxCompletionTokens != nil {
		n, err := count("max_completion_tokens", *w.MaxCompletionTokens)
		if err != nil {
			return nil, err
		}
		r.MaxTokens = n
	}
	return r, nil
}

// ParseCompletion parses a /v1/completions body. The prompt may be a string, a list of
// token ids, or a list of either (a batch; the first prompt is kept, BatchSize counts them).
func ParseCompletion(body []byte) (*Request, error) {
	w, err := decode(body)
	if err != nil {
		return nil, err
	}
	r, err := common(w)
	if err != nil {
		return nil, err
	}
	r.Kind = KindCompletion
	r.AddSpecialTokens = true
	if w.AddSpecialTokens != nil {
		r.AddSpecialTokens = *w.AddSpecialTokens
	}
	if err := parsePrompt(r, w.Prompt); err != nil {
		return nil, err
	}
	return r, nil
}

func decode(body []byte) (*wire, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, BadRequest("", "request body is empty")
	}
	if body[0] != '{' {
		return nil, BadRequest("", "request body must be a JSON object")
	}
	var w wire
	if scanWire(body, &w) {
		return &w, nil
	}
	w = wire{}
	if err := json.Unmarshal(body, &w); err != nil {
		var te *json.UnmarshalTypeError
		if asTypeError(err, &te) && te.Field != "" {
			return nil, BadRequest(te.Field, fmt.Sprintf("field %q has the wrong type (%s)", te.Field, te.Value))
		}
		return nil, BadRequest("", "malformed JSON: "+err.Error())
	}
	orderTools(body, &w)
	return &w, nil
}

func common(w *wire) (*Request, error) {
	if w.Model == nil || strings.TrimSpace(*w.Model) == "" {
		return nil, BadRequest("model", "'model' is required")
	}
	r := &Request{Model: *w.Model, Stream: w.Stream}
	if w.StreamOptions != nil {
		r.StreamIncludeUsage = w.StreamOptions.IncludeUsage
	}
	if w.MaxTokens != nil {
		n, err := count("max_tokens", *w.MaxTokens)
		if err != nil {
			return nil, err
		}
		r.MaxTokens = n
	}
	if w.CacheSalt != nil {
		if *w.CacheSalt == "" {
			return nil, BadRequest("cache_salt", "cache_salt, when given, must be a non-empty string")
		}
		r.CacheSalt = *w.CacheSalt
	}
	if w.PromptCacheKey != nil {
		r.PromptCacheKey = *w.PromptCacheKey
	}
	return r, nil
}

func count(field string, v float64) (int, error) {
	if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
		return 0, BadRequest(field, field+" must be a non-negative integer")
	}
	return int(v), nil
}

func parsePrompt(r *Request, raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return BadRequest("prompt", "'prompt' is required")
	}
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &r.Prompt); err != nil {
			return BadRequest("prompt", "prompt: "+err.Error())
		}
		r.BatchSize = 1
		return nil
	case '[':
	default:
		return BadRequest("prompt", "prompt must be a string, a list of token ids, or a list of those")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return BadRequest("prompt", "prompt: "+err.Error())
	}
	if len(items) == 0 {
		return BadRequest("prompt", "prompt must not be empty")
	}
	first := bytes.TrimSpace(items[0])
	switch first[0] {
	case '"': // list of strings
		r.BatchSize = len(items)
		for i, it := range items {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return BadRequest(fmt.Sprintf("prompt[%d]", i), "a list prompt must hold only strings or only token-id lists")
			}
			if i == 0 {
				r.Prompt = s
			}
		}
		return nil
	case '[': // list of token-id lists
		r.BatchSize = len(items)
		for i, it := range items {
			ids, err := tokenIDs(it)
			if err != nil {
				return BadRequest(fmt.Sprintf("prompt[%d]", i), err.Error())
			}
			if i == 0 {
				r.PromptIDs, r.HasPromptIDs = ids, true
			}
		}
		return nil
	default: // one list of token ids
		ids, err := tokenIDs(raw)
		if err != nil {
			return BadRequest("prompt", err.Error())
		}
		r.PromptIDs, r.HasPromptIDs, r.BatchSize = ids, true, 1
		return nil
	}
}

func tokenIDs(raw json.RawMessage) ([]uint32, error) {
	var nums []float64
	if err := json.Unmarshal(raw, &nums); err != nil {
		return nil, fmt.Errorf("token ids must be a list of non-negative integers")
	}
	if len(nums) == 0 {
		return nil, fmt.Errorf("token-id prompt must not be empty")
	}
	ids := make([]uint32, len(nums))
	for i, n := range nums {
		if n != math.Trunc(n) || n < 0 || n > math.MaxUint32 {
			return nil, fmt.Errorf("token id %v at %d is not a non-negative 32-bit integer", n, i)
		}
		ids[i] = uint32(n)
	}
	return ids, nil
}

// ChatRequest returns the tokenizer's view of a chat request.
func (r *Request) ChatRequest() *tokenizer.ChatRequest {
	return &tokenizer.ChatRequest{
		Messages:             r.Messages,
		Tools:                r.Tools,
		AddGenerationPrompt:  r.AddGenerationPrompt,
		ContinueFinalMessage: r.ContinueFinalMessage,
		ChatTemplateKwargs:   r.ChatTemplateKwargs,
		AddSpecialTokens:     r.AddSpecialTokens,
	}
}

// Tokenize returns the prompt's token ids as the engine would compute them. A token-id
// completion prompt needs no tokenizer; tok may be nil then.
func (r *Request) Tokenize(ctx context.Context, tok tokenizer.Tokenizer) (tokenizer.Result, error) {
	if r.Kind == KindCompletion && r.HasPromptIDs {
		return tokenizer.Result{IDs: r.PromptIDs}, nil
	}
	if tok == nil {
		return tokenizer.Result{}, ErrNoTokenizer
	}
	if r.Kind == KindChat {
		return tok.Chat(ctx, r.Model, r.ChatRequest())
	}
	return tok.Completion(ctx, r.Model, r.Prompt, r.AddSpecialTokens)
}

// CanonicalText is a tokenizer-free canonical form of the prompt, for hash affinity when
// no rendered prompt is available: a completion's text, or each chat message as
// "role\x1fcontent\x1e" with content parts' text joined by "\n". Token-id prompts give "".
func (r *Request) CanonicalText() string {
	if r.Kind == KindCompletion {
		return r.Prompt
	}
	var b strings.Builder
	for _, m := range r.Messages {
		role, _ := m["role"].(string)
		b.WriteString(role)
		b.WriteByte(0x1f)
		b.WriteString(ContentText(m["content"]))
		b.WriteByte(0x1e)
	}
	return b.String()
}

// ContentText flattens a message content (a string or an array of parts) to text the
// way vLLM does for string-format chat templates: text parts joined by "\n".
func ContentText(c any) string {
	switch x := c.(type) {
	case string:
		return x
	case []any:
		var parts []string
		for _, p := range x {
			if m, ok := p.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}
