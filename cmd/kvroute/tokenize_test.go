package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/tokenizer"
)

func TestTokenizeCommand(t *testing.T) {
	m, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	f := &tokenizeFlags{keys: true, blockSize: 4, maxInputBytes: 1 << 20}
	var out bytes.Buffer
	body := `{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Hello there, how are you today?"}]}`
	if err := f.run(context.Background(), m, strings.NewReader(body), &out, false); err != nil {
		t.Fatal(err)
	}
	var got tokenizeOutput
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n"
	ids, _ := m.Encode(want, false)
	if got.Prompt != want || !reflect.DeepEqual(got.TokenIDs, ids) || got.Count != len(ids) {
		t.Fatalf("got %+v", got)
	}
	keys := kvblock.Keys(nil, kvblock.Seed("Qwen/Qwen3-0.6B", "", ""), ids, 4)
	if len(got.Keys) != len(keys) || len(keys) == 0 {
		t.Fatalf("keys %v, want %d", got.Keys, len(keys))
	}

	out.Reset()
	if err := f.run(context.Background(), m, strings.NewReader(`{"prompt":"Hello"}`), &out, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"token_ids":[9707]`) {
		t.Fatalf("completion output %s", out.String())
	}

	for _, bad := range []string{`[1,2]`, `{"nothing":1}`, `{"prompt":"x","add_special_tokens":"yes"}`, `{`} {
		if err := f.run(context.Background(), m, strings.NewReader(bad), &out, false); err == nil {
			t.Errorf("body %s: no error", bad)
		}
	}
	f.maxInputBytes = 10
	if err := f.run(context.Background(), m, strings.NewReader(body), &out, false); !errors.Is(err, tokenizer.ErrTooLarge) {
		t.Errorf("large body: %v", err)
	}
}
