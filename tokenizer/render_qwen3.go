package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// qwen3TemplateSHA256 identifies the chat template of Qwen3 (the embedded default):
// the SHA-256 of tokenizer_config.json's chat_template. Only that exact source gets
// the native renderer.
const qwen3TemplateSHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"

// nativeRenderer renders a known chat template without the Jinja engine, which
// copies every long message several times (string concatenation, output
// buffer). ok is false when the request uses something the native renderer does
// not reproduce (tools, tool calls, unknown template variables, malformed
// messages); RenderChat then runs the template. Every native renderer is proven
// equal to the template by the golden cases and a fuzz target
// (FuzzNativeQwen3MatchesJinja).
type nativeRenderer func(req *ChatRequest) (out string, ok bool)

func nativeRendererFor(src string) nativeRenderer {
	sum := sha256.Sum256([]byte(src))
	if hex.EncodeToString(sum[:]) == qwen3TemplateSHA256 {
		return renderQwen3
	}
	return nil
}

// plainMessage is a message with only a role and text content.
type plainMessage struct {
	role, content string
}

// plainMessages extracts role and text content the way conversationMessage
// does, or reports false when a message has anything else the template could see
// (tool_calls on an assistant message) or conversationMessage would reject.
func plainMessages(msgs []map[string]any, dst []plainMessage) ([]plainMessage, bool) {
	for _, msg := range msgs {
		role, ok := msg["role"].(string)
		if !ok {
			return nil, false
		}
		if role == "assistant" {
			if _, ok := msg["tool_calls"].([]any); ok {
				return nil, false
			}
		}
		var text string
		switch c := msg["content"].(type) {
		case nil:
		case string:
			text = c
		case []any:
			parts := make([]string, len(c))
			for j, part := range c {
				t, err := textPart(part)
				if err != nil {
					return nil, false
				}
				parts[j] = t
			}
			text = strings.Join(parts, "\n")
		default:
			return nil, false
		}
		dst = append(dst, plainMessage{role: role, content: text})
	}
	return dst, true
}

// renderQwen3 is Qwen3's chat template for conversations without tools: the same
// output, written straight into one buffer.
func renderQwen3(req *ChatRequest) (string, bool) {
	if len(req.Tools) > 0 {
		return "", false // tools are printed with tojson: left to the template
	}
	enableThinking, thinkingSet := true, false
	for k, v := range req.ChatTemplateKwargs {
		b, isBool := v.(bool)
		if k != "enable_thinking" || !isBool {
			return "", false // a variable the template might see differently
		}
		enableThinking, thinkingSet = b, true
	}
	var stack [8]plainMessage
	msgs, ok := plainMessages(req.Messages, stack[:0])
	if !ok || len(msgs) == 0 {
		return "", false
	}
	size := 64
	for _, m := range msgs {
		size += len(m.role) + len(m.content) + 48
	}
	var b strings.Builder
	b.Grow(size)
	if msgs[0].role == "system" {
		b.WriteString("<|im_start|>system\n")
		b.WriteString(msgs[0].content)
		b.WriteString("<|im_end|>\n")
	}
	// The last user message that is not a tool response wrapped as a user turn.
	multiStepTool, lastQuery := true, len(msgs)-1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if multiStepTool && m.role == "user" &&
			!(strings.HasPrefix(m.content, "<tool_response>") && strings.HasSuffix(m.content, "</tool_response>")) {
			multiStepTool, lastQuery = false, i
		}
	}
	for i, m := range msgs {
		last := i == len(msgs)-1
		switch {
		case m.role == "user" || (m.role == "system" && i > 0):
			b.WriteString("<|im_start|>")
			b.WriteString(m.role)
			b.WriteByte('\n')
			b.WriteString(m.content)
			b.WriteString("<|im_end|>\n")
		case m.role == "assistant":
			content, reasoning := m.content, ""
			if strings.Contains(m.content, "</think>") {
				parts := strings.Split(m.content, "</think>")
				content = strings.TrimLeft(parts[len(parts)-1], "\n")
				before := strings.Split(strings.TrimRight(parts[0], "\n"), "<think>")
				reasoning = strings.TrimLeft(before[len(before)-1], "\n")
			}
			b.WriteString("<|im_start|>assistant\n")
			if i > lastQuery && (last || reasoning != "") {
				b.WriteString("<think>\n")
				b.WriteString(strings.Trim(reasoning, "\n"))
				b.WriteString("\n</think>\n\n")
				b.WriteString(strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString(content)
			}
			b.WriteString("<|im_end|>\n")
		case m.role == "tool":
			if i == 0 || msgs[i-1].role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n")
			b.WriteString(m.content)
			b.WriteString("\n</tool_response>")
			if last || msgs[i+1].role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		}
	}
	if req.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
		if thinkingSet && !enableThinking {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return b.String(), true
}
