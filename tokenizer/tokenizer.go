// Package tokenizer turns OpenAI-style requests into the exact prompt token ids a vLLM
// engine would compute for them: chat messages rendered with the model's own Jinja chat
// template, then byte-level BPE from the model's tokenizer.json, bit for bit like Hugging
// Face. It also offers an engine-backed implementation that asks a vLLM server's
// /tokenize for models it cannot render locally.
//
// The package knows nothing about routing, block keys or transport; everything in it is
// safe for concurrent use.
package tokenizer

import (
	"context"
	"errors"
)

// ChatRequest is the part of an OpenAI chat completion request that decides the prompt.
type ChatRequest struct {
	// Messages as decoded from JSON: "role", "content" (a string, or an array of parts
	// such as {"type":"text","text":...}), and any other fields (name, tool_calls, ...).
	Messages []map[string]any
	// Tools as decoded from JSON, passed to the template as `tools`; nil when absent.
	Tools []any
	// AddGenerationPrompt appends the assistant header (vLLM's default for chat: true).
	AddGenerationPrompt bool
	// ContinueFinalMessage leaves the last message open so the model continues it.
	ContinueFinalMessage bool
	// ChatTemplateKwargs are extra template variables (e.g. enable_thinking).
	ChatTemplateKwargs map[string]any
	// AddSpecialTokens adds the post-processor's tokens (BOS) after rendering; vLLM's
	// default for chat is false because templates write BOS themselves.
	AddSpecialTokens bool
}

// Result is a tokenized prompt.
type Result struct {
	// Prompt is the rendered text; empty when an engine rendered it.
	Prompt string
	IDs    []uint32
}

// Tokenizer produces prompt token ids. model is the request's model name; local
// implementations serve one model and ignore it, the engine implementation sends it.
type Tokenizer interface {
	Chat(ctx context.Context, model string, req *ChatRequest) (Result, error)
	Completion(ctx context.Context, model string, prompt string, addSpecialTokens bool) (Result, error)
}

// Errors returned by the package, wrapped with details.
var (
	ErrUnsupported = errors.New("tokenizer: unsupported component")
	ErrTooLarge    = errors.New("tokenizer: input too large")
	ErrTemplate    = errors.New("tokenizer: chat template error")
	ErrEngine      = errors.New("tokenizer: engine tokenize failed")
)
