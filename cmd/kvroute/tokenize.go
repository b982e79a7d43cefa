package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/tokenizer"
)

// tokenizeFlags maps `kvroute tokenize` flags to a tokenizer and output options.
type tokenizeFlags struct {
	modelDir            string
	chat                bool
	addGenerationPrompt bool
	keys                bool
	blockSize           int
	maxInputBytes       int
}

func newTokenizeCmd() *cobra.Command {
	f := &tokenizeFlags{}
	cmd := &cobra.Command{
		Use:   "tokenize",
		Short: "print the exact prompt token ids of an OpenAI request body read from stdin",
		Long: `tokenize reads one OpenAI request body (chat or completion) as JSON on stdin and prints
{"prompt": "<rendered text>", "token_ids": [...], "count": N}, plus "keys" (the kvblock keys of
every full block) with --keys. A body with "messages" (or --chat) is a chat request, rendered
with the model's chat template like vLLM; otherwise "prompt" is tokenized as a completion.
Without --model-dir it uses the embedded Qwen3 tokenizer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.model()
			if err != nil {
				return err
			}
			genSet := cmd.Flags().Changed("add-generation-prompt")
			return f.run(cmd.Context(), m, cmd.InOrStdin(), cmd.OutOrStdout(), genSet)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.modelDir, "model-dir", "", "directory with tokenizer.json and tokenizer_config.json (default: the embedded Qwen3 tokenizer)")
	fs.BoolVar(&f.chat, "chat", false, "treat the body as a chat request even without \"messages\"")
	fs.BoolVar(&f.addGenerationPrompt, "add-generation-prompt", true, "append the assistant header (overrides the body's add_generation_prompt; vLLM's default is true)")
	fs.BoolVar(&f.keys, "keys", false, "also print the kvblock keys of the full blocks")
	fs.IntVar(&f.blockSize, "block-size", kvblock.DefaultBlockSize, "block size for --keys, tokens")
	fs.IntVar(&f.maxInputBytes, "max-input-bytes", tokenizer.DefaultConfig().MaxInputBytes, "refuse prompts longer than this, bytes")
	return cmd
}

func (f *tokenizeFlags) model() (*tokenizer.Model, error) {
	cfg := tokenizer.DefaultConfig()
	cfg.MaxInputBytes = f.maxInputBytes
	if f.blockSize <= 0 {
		return nil, fmt.Errorf("--block-size must be positive, got %d", f.blockSize)
	}
	if f.modelDir != "" {
		return tokenizer.LoadConfig(f.modelDir, cfg)
	}
	m, err := tokenizer.Default()
	if err != nil {
		return nil, err
	}
	return m.WithConfig(cfg)
}

// tokenizeOutput is what `kvroute tokenize` prints.
type tokenizeOutput struct {
	Prompt   string   `json:"prompt"`
	TokenIDs []uint32 `json:"token_ids"`
	Count    int      `json:"count"`
	Keys     []string `json:"keys,omitempty"`
}

func (f *tokenizeFlags) run(ctx context.Context, m *tokenizer.Model, in io.Reader, out io.Writer, genSet bool) error {
	data, err := io.ReadAll(io.LimitReader(in, int64(f.maxInputBytes)+1))
	if err != nil {
		return fmt.Errorf("tokenize: read stdin: %w", err)
	}
	if len(data) > f.maxInputBytes {
		return fmt.Errorf("tokenize: %w: request body over %d bytes", tokenizer.ErrTooLarge, f.maxInputBytes)
	}
	v, err := tokenizer.DecodeJSON(data)
	if err != nil {
		return fmt.Errorf("tokenize: request body: %w", err)
	}
	obj, ok := v.(*tokenizer.Object)
	if !ok {
		return fmt.Errorf("tokenize: request body is not a JSON object")
	}
	body := obj.Values
	model, _ := body["model"].(string)
	if model == "" {
		model = m.Name()
	}
	salt, _ := body["cache_salt"].(string)
	var res tokenizer.Result
	if _, hasMessages := body["messages"]; hasMessages || f.chat {
		req, err := chatRequest(body)
		if err != nil {
			return err
		}
		if genSet {
			req.AddGenerationPrompt = f.addGenerationPrompt
		}
		if res, err = m.Chat(ctx, model, req); err != nil {
			return err
		}
	} else {
		prompt, ok := body["prompt"].(string)
		if !ok {
			return fmt.Errorf("tokenize: the body has neither \"messages\" nor a string \"prompt\"")
		}
		add, err := boolField(body, "add_special_tokens", true)
		if err != nil {
			return err
		}
		if res, err = m.Completion(ctx, model, prompt, add); err != nil {
			return err
		}
	}
	o := tokenizeOutput{Prompt: res.Prompt, TokenIDs: res.IDs, Count: len(res.IDs)}
	if o.TokenIDs == nil {
		o.TokenIDs = []uint32{}
	}
	if f.keys {
		for _, k := range kvblock.Keys(nil, kvblock.Seed(model, "", salt), res.IDs, f.blockSize) {
			o.Keys = append(o.Keys, fmt.Sprintf("%016x", k))
		}
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	return enc.Encode(o)
}

// chatRequest maps an OpenAI chat body to a tokenizer.ChatRequest with vLLM's
// defaults (add_generation_prompt true, add_special_tokens false).
func chatRequest(body map[string]any) (*tokenizer.ChatRequest, error) {
	raw, ok := body["messages"].([]any)
	if !ok {
		return nil, fmt.Errorf("tokenize: \"messages\" must be an array")
	}
	req := &tokenizer.ChatRequest{}
	for i, m := range raw {
		o, ok := m.(*tokenizer.Object)
		if !ok {
			return nil, fmt.Errorf("tokenize: messages[%d] is not an object", i)
		}
		req.Messages = append(req.Messages, o.Values)
	}
	if t, ok := body["tools"].([]any); ok {
		req.Tools = t
	}
	if kw, ok := body["chat_template_kwargs"].(*tokenizer.Object); ok {
		req.ChatTemplateKwargs = kw.Values
	}
	var err error
	if req.AddGenerationPrompt, err = boolField(body, "add_generation_prompt", true); err != nil {
		return nil, err
	}
	if req.ContinueFinalMessage, err = boolField(body, "continue_final_message", false); err != nil {
		return nil, err
	}
	if req.AddSpecialTokens, err = boolField(body, "add_special_tokens", false); err != nil {
		return nil, err
	}
	return req, nil
}

func boolField(body map[string]any, name string, def bool) (bool, error) {
	v, ok := body[name]
	if !ok || v == nil {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("tokenize: %q must be a boolean", name)
	}
	return b, nil
}
