package jsonlex

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkString: String on a short token (the tokenizer.json vocabulary's
// case), a 32 KB prompt without escapes and one with an escape per line (the
// OpenAI request's case), decoding into a reused scratch.
func BenchmarkString(b *testing.B) {
	line := strings.Repeat("Consider the prefix cache and the queue depth. ", 4)
	for _, c := range []struct{ name, s string }{
		{"token-8B", "Ġrouting"},
		{"ascii-32KB", strings.Repeat(line, 32<<10/len(line))},
		{"escaped-32KB", strings.Repeat(line+"\n", 32<<10/len(line))},
		{"utf8-32KB", strings.Repeat("日本語のプロンプト ", 32<<10/28)},
	} {
		enc, _ := json.Marshal(c.s)
		b.Run(c.name, func(b *testing.B) {
			scratch := make([]byte, 0, len(enc))
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				l := Lexer{Data: enc}
				v, ok := l.String(scratch)
				if !ok || len(v) == 0 {
					b.Fatal("String gave up")
				}
			}
		})
	}
}

// BenchmarkSkip: Skip over a nested value of ~20 KB.
func BenchmarkSkip(b *testing.B) {
	elem := `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","description":"the city, \"quoted\""},"days":{"type":"integer"}},"required":["city"]},"weights":[1,-2.5e3,0.125,true,false,null]}}`
	doc := []byte("[" + strings.Repeat(elem+",", 20<<10/len(elem)) + elem + "]")
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		l := Lexer{Data: doc}
		if !l.Skip(64) || !l.End() {
			b.Fatal("Skip gave up")
		}
	}
}
