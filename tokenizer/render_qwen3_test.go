package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// jinjaModel is the default model with the native renderer switched off.
func jinjaModel(t testing.TB) *Model {
	t.Helper()
	m, err := mustDefault(t).WithConfig(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	m.disableNative = true
	return m
}

func TestNativeQwen3Selected(t *testing.T) {
	if mustDefault(t).c.chat.native == nil {
		t.Fatal("the embedded Qwen3 template must get the native renderer")
	}
	if nativeRendererFor(mustDefault(t).c.chat.source+" ") != nil {
		t.Fatal("a changed template must not get the native renderer")
	}
}

// TestNativeQwen3Golden: the native renderer gives the reference's prompt for every
// golden chat case it takes, and it takes every case without tools.
func TestNativeQwen3Golden(t *testing.T) {
	taken, total := 0, 0
	for _, c := range readGolden(t, "qwen3") {
		if c.Kind != "chat" {
			continue
		}
		total++
		req, err := chatRequestFromGolden(c)
		if err != nil {
			t.Fatal(err)
		}
		out, ok := renderQwen3(req)
		if !ok {
			if len(req.Tools) == 0 && !hasToolCalls(req) {
				t.Errorf("%s: native renderer refused a case without tools", c.Name)
			}
			continue
		}
		taken++
		if out != c.Prompt {
			t.Errorf("%s: native prompt differs:\n got %q\nwant %q", c.Name, out, c.Prompt)
		}
	}
	t.Logf("native renderer took %d of %d golden chat cases", taken, total)
	if taken < total*3/4 {
		t.Fatalf("native renderer took only %d of %d cases", taken, total)
	}
}

func hasToolCalls(req *ChatRequest) bool {
	for _, m := range req.Messages {
		if _, ok := m["tool_calls"]; ok {
			return true
		}
	}
	return false
}

// Fragments chosen to hit every branch of the template: think tags, tool-response
// wrappers, leading/trailing newlines, special tokens, non-ASCII.
var nativeFragments = []string{"", "\n", "\n\n", "<think>", "</think>", "<tool_response>", "</tool_response>",
	"x", " y ", "z\n", "é日", "<|im_end|>", "think", "\t"}

var nativeRoles = []string{"system", "user", "assistant", "tool", "developer", ""}

// randomChat builds a conversation from r: 1–6 messages, content as a string, a
// list of parts or null, optional enable_thinking and add_generation_prompt.
func randomChat(r *rand.Rand) *ChatRequest {
	req := &ChatRequest{AddGenerationPrompt: r.IntN(2) == 0}
	n := 1 + r.IntN(6)
	for range n {
		text := func() string {
			var b strings.Builder
			for range r.IntN(5) {
				b.WriteString(nativeFragments[r.IntN(len(nativeFragments))])
			}
			return b.String()
		}
		msg := map[string]any{"role": nativeRoles[r.IntN(len(nativeRoles))]}
		switch r.IntN(6) {
		case 0:
			msg["content"] = nil
		case 1:
			msg["content"] = []any{map[string]any{"type": "text", "text": text()}, map[string]any{"type": "text", "text": text()}}
		default:
			msg["content"] = text()
		}
		if r.IntN(8) == 0 {
			msg["name"] = "n"
		}
		req.Messages = append(req.Messages, msg)
	}
	switch r.IntN(3) {
	case 0:
		req.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	case 1:
		req.ChatTemplateKwargs = map[string]any{"enable_thinking": true}
	}
	return req
}

// checkNativeMatchesJinja renders req natively and with the Jinja engine; when the
// native renderer takes the request the two must agree byte for byte.
func checkNativeMatchesJinja(t *testing.T, jm *Model, req *ChatRequest) bool {
	t.Helper()
	out, ok := renderQwen3(req)
	if !ok {
		return false
	}
	want, err := jm.RenderChat(req)
	if err != nil {
		t.Fatalf("native rendered a request the template rejects (%v): %+v", err, req.Messages)
	}
	if out != want {
		t.Fatalf("native and Jinja differ for %+v (kwargs %v, agp %v):\n got %q\nwant %q",
			req.Messages, req.ChatTemplateKwargs, req.AddGenerationPrompt, out, want)
	}
	return true
}

func TestNativeQwen3MatchesJinjaRandom(t *testing.T) {
	jm := jinjaModel(t)
	r := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 800
	}
	taken := 0
	for range n {
		if checkNativeMatchesJinja(t, jm, randomChat(r)) {
			taken++
		}
	}
	if taken < n/2 {
		t.Fatalf("native renderer took only %d of %d random chats", taken, n)
	}
}

func FuzzNativeQwen3MatchesJinja(f *testing.F) {
	for i := range uint64(8) {
		f.Add(i, i*7919)
	}
	jm := jinjaModel(f)
	f.Fuzz(func(t *testing.T, a, b uint64) {
		checkNativeMatchesJinja(t, jm, randomChat(rand.New(rand.NewPCG(a, b))))
	})
}
