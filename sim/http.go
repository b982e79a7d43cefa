package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/tokenizer"
)

// Response headers with the simulator's own view of a request (seconds).
const (
	HeaderTTFT     = "X-Kvroute-Sim-Ttft-Seconds"      // simulated time to first token
	HeaderWallTTFT = "X-Kvroute-Sim-Wall-Ttft-Seconds" // wall-clock time to first token
)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleCompletion)
	mux.HandleFunc("POST /v1/chat/completions", s.handleCompletion)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("POST /reset_prefix_cache", s.handleReset)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "kvroute-sim"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /admin/faults", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Faults()) })
	mux.HandleFunc("POST /admin/faults", s.handleFaults)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, openai.NewError(http.StatusRequestEntityTooLarge, "BadRequestError", "", fmt.Sprintf("request body larger than %d bytes", s.cfg.MaxRequestBytes))
		}
		return nil, openai.BadRequest("", "reading the body: "+err.Error())
	}
	return body, nil
}

// adapter resolves a request's model name: the base model ("") or a LoRA adapter.
func (s *Server) adapter(model string) (string, error) {
	if model == s.cfg.Model {
		return "", nil
	}
	if slices.Contains(s.cfg.LoRAAdapters, model) {
		return model, nil
	}
	return "", openai.NewError(http.StatusNotFound, "NotFoundError", "404", fmt.Sprintf("The model `%s` does not exist.", model))
}

// apiError maps package errors to OpenAI-shaped HTTP errors.
func apiError(err error) error {
	var oe *openai.Error
	switch {
	case errors.As(err, &oe):
		return err
	case errors.Is(err, ErrTooLong):
		msg, _ := strings.CutPrefix(err.Error(), ErrTooLong.Error()+": ")
		return openai.NewError(http.StatusBadRequest, "BadRequestError", "400", msg)
	case errors.Is(err, ErrBadRequest), errors.Is(err, openai.ErrNoTokenizer),
		errors.Is(err, tokenizer.ErrTemplate), errors.Is(err, tokenizer.ErrTooLarge), errors.Is(err, tokenizer.ErrUnsupported):
		return openai.NewError(http.StatusBadRequest, "BadRequestError", "400", err.Error())
	case errors.Is(err, ErrRestarted), errors.Is(err, ErrClosed):
		return openai.NewError(http.StatusServiceUnavailable, "ServiceUnavailableError", "503", err.Error())
	default:
		return openai.NewError(http.StatusInternalServerError, "InternalServerError", "500", err.Error())
	}
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) handleCompletion(w http.ResponseWriter, hr *http.Request) {
	chat := hr.URL.Path == "/v1/chat/completions"
	body, err := s.readBody(w, hr)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	var req *openai.Request
	if chat {
		req, err = openai.ParseChat(body)
	} else {
		req, err = openai.ParseCompletion(body)
	}
	if err != nil {
		openai.WriteError(w, apiError(err))
		return
	}
	lora, err := s.adapter(req.Model)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if req.BatchSize > 1 {
		openai.WriteError(w, openai.BadRequest("prompt", "the simulator serves one prompt per request; send the prompts of a batch as separate requests"))
		return
	}
	failStatus, cut := s.eng.drawFaults()
	if failStatus != 0 {
		s.m.injected()
		typ := "InternalServerError"
		if failStatus == http.StatusServiceUnavailable {
			typ = "ServiceUnavailableError"
		}
		openai.WriteError(w, openai.NewError(failStatus, typ, strconv.Itoa(failStatus), ErrInjected.Error()))
		return
	}
	ctx := hr.Context()
	res, err := req.Tokenize(ctx, s.tok)
	if err != nil {
		openai.WriteError(w, apiError(err))
		return
	}
	r, err := s.submit(res.IDs, lora, req.CacheSalt, req.MaxTokens)
	if err != nil {
		openai.WriteError(w, apiError(err))
		return
	}
	resp := &responder{s: s, w: w, r: r, req: req, chat: chat, created: time.Now().Unix()}
	if chat {
		resp.id = newID("chatcmpl-")
	} else {
		resp.id = newID("cmpl-")
	}
	if req.Stream {
		resp.stream(ctx, cut && req.Stream)
	} else {
		resp.whole(ctx)
	}
}

// responder writes one completion response, whole or as an SSE stream.
type responder struct {
	s       *Server
	w       http.ResponseWriter
	r       *request
	req     *openai.Request
	chat    bool
	id      string
	created int64
	text    strings.Builder
}

// wait blocks until the request made progress beyond `have` tokens or ended.
func (p *responder) wait(ctx context.Context, have int) (snapshot, error) {
	for {
		snap := p.r.snapshot()
		if snap.done || snap.out > have {
			return snap, nil
		}
		select {
		case <-p.r.ch:
		case <-ctx.Done():
			p.s.eng.cancel(p.r)
			return snap, ctx.Err()
		}
	}
}

func (p *responder) words(from, to int) string {
	p.text.Reset()
	for i := from; i < to; i++ {
		p.text.WriteString(p.s.filler[i%len(p.s.filler)])
	}
	return p.text.String()
}

// Response bodies in OpenAI's (and vLLM's) shape.
type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type messageJSON struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}

type deltaJSON struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type choiceJSON struct {
	Index        int          `json:"index"`
	Text         *string      `json:"text,omitempty"`
	Message      *messageJSON `json:"message,omitempty"`
	Delta        *deltaJSON   `json:"delta,omitempty"`
	Logprobs     any          `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
	StopReason   any          `json:"stop_reason"`
}

type responseJSON struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []choiceJSON `json:"choices"`
	Usage   *usageJSON   `json:"usage,omitempty"`
}

var finishLength = "length"

func (p *responder) usage(snap snapshot) *usageJSON {
	u := &usageJSON{PromptTokens: p.r.numPrompt, CompletionTokens: snap.out, TotalTokens: p.r.numPrompt + snap.out}
	u.PromptTokensDetails.CachedTokens = snap.cached
	return u
}

func (p *responder) setTimingHeaders(snap snapshot) {
	h := p.w.Header()
	h.Set(HeaderTTFT, strconv.FormatFloat(snap.ttft.Seconds(), 'f', 6, 64))
	h.Set(HeaderWallTTFT, strconv.FormatFloat(snap.ttftW.Seconds(), 'f', 6, 64))
}

func (p *responder) whole(ctx context.Context) {
	var snap snapshot
	for {
		var err error
		snap, err = p.wait(ctx, snap.out)
		if err != nil {
			return // client gone
		}
		if snap.done {
			break
		}
	}
	if snap.err != nil {
		openai.WriteError(p.w, apiError(snap.err))
		return
	}
	text := p.words(0, snap.out)
	choice := choiceJSON{FinishReason: &finishLength}
	object := "text_completion"
	if p.chat {
		object = "chat.completion"
		choice.Message = &messageJSON{Role: "assistant", Content: text, ToolCalls: []any{}}
	} else {
		choice.Text = &text
	}
	p.setTimingHeaders(snap)
	writeJSON(p.w, http.StatusOK, responseJSON{ID: p.id, Object: object, Created: p.created, Model: p.req.Model,
		Choices: []choiceJSON{choice}, Usage: p.usage(snap)})
}

func (p *responder) chunk(choice *choiceJSON, usage *usageJSON) []byte {
	object := "text_completion"
	if p.chat {
		object = "chat.completion.chunk"
	}
	m := responseJSON{ID: p.id, Object: object, Created: p.created, Model: p.req.Model, Choices: []choiceJSON{}, Usage: usage}
	if choice != nil {
		m.Choices = []choiceJSON{*choice}
	}
	var b bytes.Buffer
	b.WriteString("data: ")
	_ = json.NewEncoder(&b).Encode(m) // ends with "\n"
	b.WriteString("\n")
	return b.Bytes()
}

// stream writes the SSE stream: headers at the first token (so a request that fails
// before it still gets a proper error status), one chunk per step's new tokens, the
// final chunk with finish_reason, the usage chunk when asked, then [DONE]. With cut, it
// drops the connection after about half the tokens.
func (p *responder) stream(ctx context.Context, cut bool) {
	snap, err := p.wait(ctx, 0)
	if err != nil {
		return
	}
	if snap.err != nil {
		openai.WriteError(p.w, apiError(snap.err))
		return
	}
	h := p.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	p.setTimingHeaders(snap)
	p.w.WriteHeader(http.StatusOK)
	flusher, _ := p.w.(http.Flusher)
	cutAt := max(1, p.r.maxOut/2)
	if p.chat {
		empty := ""
		_, _ = p.w.Write(p.chunk(&choiceJSON{Delta: &deltaJSON{Role: "assistant", Content: &empty}}, nil))
	}
	sent := 0
	for {
		upto := snap.out
		if cut {
			upto = min(upto, cutAt)
		}
		if upto > sent {
			text := p.words(sent, upto)
			choice := choiceJSON{}
			if p.chat {
				choice.Delta = &deltaJSON{Content: &text}
			} else {
				choice.Text = &text
			}
			if snap.done && snap.err == nil && upto == snap.out {
				choice.FinishReason = &finishLength
			}
			_, _ = p.w.Write(p.chunk(&choice, nil))
			sent = upto
			if flusher != nil {
				flusher.Flush()
			}
		}
		if cut && sent >= cutAt && sent < p.r.maxOut {
			p.s.m.injected()
			if !snap.done {
				p.s.eng.cancel(p.r)
			}
			panic(http.ErrAbortHandler) // drop the connection mid-stream
		}
		if snap.done {
			break
		}
		if snap, err = p.wait(ctx, sent); err != nil {
			return
		}
	}
	if snap.err != nil {
		// Like a crashing engine: the stream ends without [DONE].
		panic(http.ErrAbortHandler)
	}
	if p.req.StreamIncludeUsage {
		_, _ = p.w.Write(p.chunk(nil, p.usage(snap)))
	}
	_, _ = io.WriteString(p.w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	card := func(id, root string, parent any) map[string]any {
		return map[string]any{"id": id, "object": "model", "created": s.created, "owned_by": "vllm",
			"root": root, "parent": parent, "max_model_len": s.eng.maxLen()}
	}
	data := []any{card(s.cfg.Model, s.cfg.Model, nil)}
	for _, a := range s.cfg.LoRAAdapters {
		data = append(data, card(a, a, s.cfg.Model))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// handleTokenize serves vLLM's /tokenize in its completion form {model, prompt,
// add_special_tokens} and its chat form {model, messages, add_generation_prompt, ...}.
func (s *Server) handleTokenize(w http.ResponseWriter, hr *http.Request) {
	body, err := s.readBody(w, hr)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil {
		openai.WriteError(w, openai.BadRequest("", "invalid JSON: "+err.Error()))
		return
	}
	if _, ok := probe["model"]; !ok {
		probe["model"], _ = json.Marshal(s.cfg.Model)
		body, _ = json.Marshal(probe)
	}
	var req *openai.Request
	if _, isChat := probe["messages"]; isChat {
		req, err = openai.ParseChat(body)
	} else {
		req, err = openai.ParseCompletion(body)
	}
	if err != nil {
		openai.WriteError(w, apiError(err))
		return
	}
	if _, err := s.adapter(req.Model); err != nil {
		openai.WriteError(w, err)
		return
	}
	res, err := req.Tokenize(hr.Context(), s.tok)
	if err != nil {
		openai.WriteError(w, apiError(err))
		return
	}
	ids := res.IDs
	if ids == nil {
		ids = []uint32{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": s.eng.maxLen(), "tokens": ids, "token_strs": nil})
}

// decoder is what /detokenize needs of the tokenizer (tokenizer.Model has it).
type decoder interface {
	Decode(ids []uint32, skipSpecial bool) (string, error)
}

func (s *Server) handleDetokenize(w http.ResponseWriter, hr *http.Request) {
	body, err := s.readBody(w, hr)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	var req struct {
		Model  string   `json:"model"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		openai.WriteError(w, openai.BadRequest("tokens", "want {\"model\": ..., \"tokens\": [ids]}: "+err.Error()))
		return
	}
	if req.Model != "" {
		if _, err := s.adapter(req.Model); err != nil {
			openai.WriteError(w, err)
			return
		}
	}
	dec, ok := s.tok.(decoder)
	if !ok {
		openai.WriteError(w, openai.NewError(http.StatusNotImplemented, "NotImplementedError", "501", "this simulator's tokenizer cannot decode"))
		return
	}
	text, err := dec.Decode(req.Tokens, false)
	if err != nil {
		openai.WriteError(w, openai.BadRequest("tokens", err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": text})
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	if err := s.ResetPrefixCache(); err != nil {
		openai.WriteError(w, openai.NewError(http.StatusConflict, "ConflictError", "409", err.Error()))
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleFaults(w http.ResponseWriter, hr *http.Request) {
	body, err := s.readBody(w, hr)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	var req FaultRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		openai.WriteError(w, openai.BadRequest("", "fault request: "+err.Error()))
		return
	}
	if err := s.SetFaults(req.Faults); err != nil {
		openai.WriteError(w, openai.BadRequest("", err.Error()))
		return
	}
	if req.Restart {
		if err := s.Restart(); err != nil {
			openai.WriteError(w, apiError(err))
			return
		}
	}
	writeJSON(w, http.StatusOK, s.Faults())
}
