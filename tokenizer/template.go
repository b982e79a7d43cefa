package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// contentFormat is how message content reaches the template, decided like vLLM
// does from the template source: "string" templates get one string per message
// (text parts joined with "\n"), "openai" templates get the list of parts.
type contentFormat int

const (
	contentString contentFormat = iota
	contentOpenAI
)

// chatTemplate is a compiled tokenizer_config.json chat template.
type chatTemplate struct {
	tmpl   *jinja.Template
	format contentFormat
	source string
	native nativeRenderer // nil: always the Jinja engine
}

// raiseName is the function raise_exception calls are rewritten to, so that the
// error can name the template line that raised it.
const raiseName = "__kvroute_raise_exception"

var (
	raiseCall = regexp.MustCompile(`\braise_exception\s*\(`)
	// A loop over a message's content means the template walks content parts.
	contentLoop = regexp.MustCompile(`\{%-?\s*for\s+\w+\s+in\s+[^%]*content\b`)
)

func compileChatTemplate(src string) (*chatTemplate, error) {
	rewritten := rewriteRaise(src)
	t, err := jinja.Compile(rewritten)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	ct := &chatTemplate{tmpl: t, source: src, native: nativeRendererFor(src)}
	if contentLoop.MatchString(src) {
		ct.format = contentOpenAI
	}
	return ct, nil
}

// rewriteRaise turns raise_exception(msg) inside {% %} and {{ }} tags into
// __kvroute_raise_exception(LINE, msg). Text outside tags is left alone.
func rewriteRaise(src string) string {
	if !strings.Contains(src, "raise_exception") {
		return src
	}
	var b strings.Builder
	line := 1
	i := 0
	for i < len(src) {
		open := strings.Index(src[i:], "{")
		if open < 0 || i+open+1 >= len(src) {
			b.WriteString(src[i:])
			break
		}
		open += i
		var closeTag string
		switch src[open+1] {
		case '%':
			closeTag = "%}"
		case '{':
			closeTag = "}}"
		default:
			b.WriteString(src[i : open+1])
			line += strings.Count(src[i:open+1], "\n")
			i = open + 1
			continue
		}
		end := strings.Index(src[open+2:], closeTag)
		if end < 0 {
			b.WriteString(src[i:])
			break
		}
		end += open + 2 + len(closeTag)
		b.WriteString(src[i:open])
		line += strings.Count(src[i:open], "\n")
		tag := src[open:end]
		tagLine := line
		b.WriteString(raiseCall.ReplaceAllStringFunc(tag, func(string) string {
			return raiseName + "(" + strconv.Itoa(tagLine) + ", "
		}))
		line += strings.Count(tag, "\n")
		i = end
	}
	return b.String()
}

func raiseWithLine(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 2 {
		return jinja.Undefined(), fmt.Errorf("raise_exception without a message")
	}
	return jinja.Undefined(), fmt.Errorf("line %d: raise_exception: %s", args[0].AsInt(), args[1].String())
}

// RenderChat renders the model's chat template for req, the way vLLM prepares
// messages for it (see the package documentation of the differences from plain
// Hugging Face): the prompt text, before tokenization.
func (m *Model) RenderChat(req *ChatRequest) (string, error) {
	if req == nil {
		return "", fmt.Errorf("%w: nil request", ErrTemplate)
	}
	ct := m.c.chat
	if ct == nil {
		return "", fmt.Errorf("%w: the model has no chat_template", ErrTemplate)
	}
	if req.AddGenerationPrompt && req.ContinueFinalMessage {
		return "", fmt.Errorf("%w: add_generation_prompt and continue_final_message cannot both be set", ErrTemplate)
	}
	if len(req.Messages) == 0 {
		return "", fmt.Errorf("%w: no messages", ErrTemplate)
	}
	var out string
	var err error
	native := false
	if ct.native != nil && !m.disableNative {
		out, native = ct.native(req)
	}
	if !native {
		if out, err = m.renderJinja(ct, req); err != nil {
			return "", err
		}
	}
	if req.ContinueFinalMessage {
		if out, err = trimToFinalMessage(out, req.Messages[len(req.Messages)-1]); err != nil {
			return "", err
		}
	}
	if len(out) > m.cfg.MaxInputBytes {
		return "", fmt.Errorf("%w: rendered prompt is %d bytes, limit %d", ErrTooLarge, len(out), m.cfg.MaxInputBytes)
	}
	return out, nil
}

// renderJinja renders the template with the Jinja engine.
func (m *Model) renderJinja(ct *chatTemplate, req *ChatRequest) (string, error) {
	msgs := make([]jinja.Value, 0, len(req.Messages))
	for i, msg := range req.Messages {
		v, err := conversationMessage(msg, ct.format)
		if err != nil {
			return "", fmt.Errorf("message %d: %w", i, err)
		}
		msgs = append(msgs, v)
	}
	data := make(map[string]jinja.Value, 8+len(req.ChatTemplateKwargs)+len(m.c.specials))
	for k, v := range m.c.specials {
		data[k] = jinja.NewString(v)
	}
	for k, v := range req.ChatTemplateKwargs {
		data[k] = toValue(v)
	}
	data["messages"] = jinja.NewList(msgs)
	data["add_generation_prompt"] = jinja.NewBool(req.AddGenerationPrompt)
	data["tools"] = jinja.None()
	if req.Tools != nil {
		data["tools"] = toValue(req.Tools)
	}
	data["documents"] = jinja.None()
	data[raiseName] = jinja.NewCallable(raiseName, raiseWithLine)
	out, err := ct.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	return out, nil
}

// trimToFinalMessage cuts the rendered prompt right after the last message's
// text, so the model continues it (Hugging Face's continue_final_message).
func trimToFinalMessage(out string, last map[string]any) (string, error) {
	var final string
	switch c := last["content"].(type) {
	case string:
		final = c
	case []any:
		for i := len(c) - 1; i >= 0; i-- {
			if p, ok := c[i].(map[string]any); ok {
				if t, ok := p["text"].(string); ok {
					final = t
					break
				}
			}
		}
	}
	final = strings.TrimSpace(final)
	idx := strings.LastIndex(out, final)
	if final == "" || idx < 0 {
		return "", fmt.Errorf("%w: continue_final_message: the final message does not appear in the rendered chat", ErrTemplate)
	}
	return out[:idx+len(final)], nil
}

// conversationMessage builds the message the template sees, as vLLM does: role,
// content (joined text or parts), and only name, tool_calls (assistant, with JSON
// string arguments parsed to objects) and tool_call_id (tool) besides.
func conversationMessage(msg map[string]any, format contentFormat) (jinja.Value, error) {
	role, ok := msg["role"].(string)
	if !ok {
		return jinja.Value{}, fmt.Errorf("%w: message without a string role", ErrTemplate)
	}
	out := jinja.NewDict()
	d := out.AsDict()
	d.Set("role", jinja.NewString(role))
	var texts []string
	switch c := msg["content"].(type) {
	case nil:
	case string:
		texts = []string{c}
	case []any:
		for j, part := range c {
			text, err := textPart(part)
			if err != nil {
				return jinja.Value{}, fmt.Errorf("content part %d: %w", j, err)
			}
			texts = append(texts, text)
		}
	default:
		return jinja.Value{}, fmt.Errorf("%w: content of type %T", ErrTemplate, c)
	}
	if format == contentString {
		d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
	} else {
		parts := make([]jinja.Value, len(texts))
		for j, t := range texts {
			p := jinja.NewDict()
			p.AsDict().Set("type", jinja.NewString("text"))
			p.AsDict().Set("text", jinja.NewString(t))
			parts[j] = p
		}
		d.Set("content", jinja.NewList(parts))
	}
	switch role {
	case "assistant":
		if tc, ok := msg["tool_calls"].([]any); ok {
			calls, err := toolCalls(tc)
			if err != nil {
				return jinja.Value{}, err
			}
			d.Set("tool_calls", calls)
		}
	case "tool":
		if id, ok := msg["tool_call_id"]; ok {
			d.Set("tool_call_id", toValue(id))
		}
	}
	if name, ok := msg["name"].(string); ok {
		d.Set("name", jinja.NewString(name))
	}
	return out, nil
}

func textPart(part any) (string, error) {
	switch p := part.(type) {
	case string:
		return p, nil
	case map[string]any:
		typ, _ := p["type"].(string)
		if typ != "text" {
			return "", fmt.Errorf("%w: content part type %q (text-only tokenizer)", ErrUnsupported, typ)
		}
		text, ok := p["text"].(string)
		if !ok {
			return "", fmt.Errorf("%w: text part without a string text", ErrTemplate)
		}
		return text, nil
	case *Object:
		return textPart(p.Map())
	default:
		return "", fmt.Errorf("%w: content part of type %T", ErrTemplate, part)
	}
}

// toolCalls copies tool calls, parsing string arguments into objects (vLLM does
// this because templates expect a mapping they can pass to tojson or iterate).
func toolCalls(calls []any) (jinja.Value, error) {
	out := make([]jinja.Value, 0, len(calls))
	for i, c := range calls {
		v := toValue(c)
		if !v.IsDict() {
			return jinja.Value{}, fmt.Errorf("%w: tool_calls[%d] is not an object", ErrTemplate, i)
		}
		if fn, ok := v.AsDict().Get("function"); ok && fn.IsDict() {
			args, _ := fn.AsDict().Get("arguments")
			switch {
			case args.IsString() && args.AsString() != "":
				parsed, err := DecodeJSON([]byte(args.AsString()))
				if err != nil {
					return jinja.Value{}, fmt.Errorf("%w: tool_calls[%d].function.arguments is not JSON: %v", ErrTemplate, i, err)
				}
				fn.AsDict().Set("arguments", toValue(parsed))
			case args.IsUndefined() || args.IsNone() || (args.IsString() && args.AsString() == ""):
				fn.AsDict().Set("arguments", jinja.NewDict())
			}
		}
		out = append(out, v)
	}
	return jinja.NewList(out), nil
}

// toValue converts decoded JSON (and common Go values) for the template. Objects
// decoded by DecodeJSON keep their key order (tojson output depends on it);
// plain map[string]any has none, so its keys are sorted.
func toValue(v any) jinja.Value {
	switch x := v.(type) {
	case nil:
		return jinja.None()
	case *Object:
		d := jinja.NewDict()
		for _, k := range x.Keys {
			d.AsDict().Set(k, toValue(x.Values[k]))
		}
		return d
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			d.AsDict().Set(k, toValue(x[k]))
		}
		return d
	case []any:
		items := make([]jinja.Value, len(x))
		for i, it := range x {
			items[i] = toValue(it)
		}
		return jinja.NewList(items)
	case jinja.Value:
		return x
	case json.Number:
		return jinja.FromGoValue(x)
	case float64:
		if x == float64(int64(x)) && x >= -1<<53 && x <= 1<<53 {
			// encoding/json gives every number as float64; JSON integers are
			// integers to the template (tojson prints 3, not 3.0).
			return jinja.NewInt(int64(x))
		}
		return jinja.NewFloat(x)
	case int:
		return jinja.NewInt(int64(x))
	case int64:
		return jinja.NewInt(x)
	case uint32:
		return jinja.NewInt(int64(x))
	default:
		return jinja.FromGoValue(v)
	}
}
