package tokenizer_test

import (
	"context"
	"fmt"

	"github.com/kvroute/kvroute/tokenizer"
)

// Tokenize a chat request exactly as a vLLM server serving Qwen3 would.
func Example() {
	m, err := tokenizer.Default()
	if err != nil {
		panic(err)
	}
	res, err := m.Chat(context.Background(), m.Name(), &tokenizer.ChatRequest{
		Messages:            []map[string]any{{"role": "user", "content": "Hello!"}},
		AddGenerationPrompt: true,
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", res.Prompt)
	fmt.Println(res.IDs)
	text, _ := m.Decode(res.IDs, false)
	fmt.Println(text == res.Prompt)
	// Output:
	// "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
	// [151644 872 198 9707 0 151645 198 151644 77091 198]
	// true
}
