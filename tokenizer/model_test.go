package tokenizer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func mustDefault(t testing.TB) *Model {
	t.Helper()
	m, err := Default()
	if err != nil {
		t.Fatalf("Default: %v", err)
	}
	return m
}

// Ids below were produced by @huggingface/tokenizers 0.2.0 on Qwen3's tokenizer.json.
func TestDefaultEncodeDecode(t *testing.T) {
	m := mustDefault(t)
	if m.Name() != DefaultModelName {
		t.Fatalf("Name = %q", m.Name())
	}
	cases := []struct {
		text string
		ids  []uint32
	}{
		{"Hello, world! It's 2024.  \n\n  ok", []uint32{9707, 11, 1879, 0, 1084, 594, 220, 17, 15, 17, 19, 13, 18611, 220, 5394}},
		{"<|im_start|>user\nhi<|im_end|>", []uint32{151644, 872, 198, 6023, 151645}},
		{"你好世界 🎉", []uint32{108386, 99489, 11162, 236, 231}},
		{"", []uint32{}},
	}
	for _, c := range cases {
		ids, err := m.Encode(c.text, false)
		if err != nil {
			t.Fatalf("Encode(%q): %v", c.text, err)
		}
		if !reflect.DeepEqual(ids, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, ids, c.ids)
		}
		back, err := m.Decode(ids, false)
		if err != nil || back != c.text {
			t.Errorf("Decode(%v) = %q, %v; want %q", ids, back, err, c.text)
		}
	}
	// Qwen3 has no post-processor tokens: addSpecial changes nothing.
	ids, _ := m.Encode("hi", true)
	if !reflect.DeepEqual(ids, []uint32{6023}) {
		t.Errorf("Encode(hi, true) = %v", ids)
	}
	text, err := m.Decode([]uint32{151644, 872, 198, 6023, 151645}, true)
	if err != nil || text != "user\nhi" {
		t.Errorf("Decode skipSpecial = %q, %v", text, err)
	}
	if _, err := m.Decode([]uint32{1 << 30}, false); err == nil {
		t.Error("Decode of an unknown id: no error")
	}
}

func TestChatAndCompletion(t *testing.T) {
	m := mustDefault(t)
	req := &ChatRequest{
		Messages:            []map[string]any{{"role": "system", "content": "sys"}, {"role": "user", "content": "Hi"}},
		AddGenerationPrompt: true,
	}
	res, err := m.Chat(context.Background(), "Qwen/Qwen3-0.6B", req)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if res.Prompt != want {
		t.Fatalf("prompt %q", res.Prompt)
	}
	ids, _ := m.Encode(want, false)
	if !reflect.DeepEqual(res.IDs, ids) {
		t.Fatalf("ids %v != %v", res.IDs, ids)
	}
	// Content-part arrays are joined with "\n", as vLLM does for string templates.
	req.Messages[1]["content"] = []any{map[string]any{"type": "text", "text": "a"}, map[string]any{"type": "text", "text": "b"}}
	p, err := m.RenderChat(req)
	if err != nil || !strings.Contains(p, "<|im_start|>user\na\nb<|im_end|>") {
		t.Fatalf("parts: %q %v", p, err)
	}
	req.Messages[1]["content"] = []any{map[string]any{"type": "image_url", "image_url": map[string]any{"url": "x"}}}
	if _, err := m.RenderChat(req); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("image part: %v", err)
	}
	c, err := m.Completion(context.Background(), "", "Hello", true)
	if err != nil || c.Prompt != "Hello" || !reflect.DeepEqual(c.IDs, []uint32{9707}) {
		t.Fatalf("completion %+v %v", c, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Completion(ctx, "", "x", false); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled ctx: %v", err)
	}
}

func TestTooLarge(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInputBytes = 10
	m, err := mustDefault(t).WithConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Encode(strings.Repeat("a", 11), false); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if _, err := m.Encode(strings.Repeat("a", 10), false); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	_, err = m.RenderChat(&ChatRequest{Messages: []map[string]any{{"role": "user", "content": "a long message"}}})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("render: %v", err)
	}
	cfg.MaxInputBytes = 0
	if _, err := m.WithConfig(cfg); err == nil {
		t.Fatal("invalid config accepted")
	}
}

func TestInvalidUTF8(t *testing.T) {
	m := mustDefault(t)
	// A truncated 3-byte sequence is one U+FFFD, a stray continuation byte another.
	got, err := m.Encode("a\xe2\x82b\x80", false)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := m.Encode("a\uFFFDb\uFFFD", false)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v != %v", got, want)
	}
}

func TestTemplateErrorNamesLine(t *testing.T) {
	c, err := compileChatTemplate("{{ 'a' }}\n{% if messages|length > 1 %}\n{{ raise_exception('only one message') }}\n{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newModel(&core{chat: c, specials: map[string]string{}}, DefaultConfig())
	_, err = m.RenderChat(&ChatRequest{Messages: []map[string]any{{"role": "user", "content": "a"}, {"role": "user", "content": "b"}}})
	if !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "only one message") {
		t.Fatalf("got %v", err)
	}
	if _, err := compileChatTemplate("line one\n{% if x %}\n{% for %}"); !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), "line") {
		t.Fatalf("compile error: %v", err)
	}
}

func TestUnsupportedComponentIsNamed(t *testing.T) {
	dir := t.TempDir()
	tj := `{"version":"1.0","added_tokens":[],"normalizer":null,
	  "pre_tokenizer":{"type":"Metaspace","replacement":"▁"},
	  "model":{"type":"BPE","vocab":{"a":0},"merges":[]},"post_processor":null,"decoder":{"type":"ByteLevel"}}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tj), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "Metaspace") {
		t.Fatalf("got %v", err)
	}
	tj = strings.Replace(tj, `{"type":"Metaspace","replacement":"▁"}`, `{"type":"ByteLevel"}`, 1)
	tj = strings.Replace(tj, `"model":{"type":"BPE"`, `"model":{"type":"Unigram"`, 1)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tj), 0o644)
	if _, err := Load(dir); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "Unigram") {
		t.Fatalf("got %v", err)
	}
}
