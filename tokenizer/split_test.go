package tokenizer

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

var splitPatterns = map[string]string{"qwen": qwenPattern, "llama3": llama3Pattern, "gpt2": gpt2Pattern}

// checkSplitEqual requires the hand-written splitter to split s exactly like regexp2.
func checkSplitEqual(t testing.TB, pattern, s string) {
	t.Helper()
	re, err := newRegexSplitter(pattern)
	if err != nil {
		t.Fatal(err)
	}
	want := re.appendSplits(nil, s)
	got := knownSplitter(pattern).appendSplits(nil, s)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("split(%q):\n got %q\nwant %q", s, got, want)
	}
}

var splitAlphabet = []string{"a", "Z", "é", "ß", "ſ", "K", "x", "1", "9", "٣", "Ⅻ", "½", " ", " ", "\t", "\n", "\r", "\v", "\f",
	"\u0085", "\u00a0", "\u1680", "\u2000", "\u2028", "\u3000", "\ufeff", "\u200b", "'", "'s", "'S", "'ll", "'LL", "'re", "'Ve",
	"'d", "'m", "'t", ".", ",", "!", "-", "_", "(", "中", "の", "한", "م", "😀", "\u0301", "<", "|", "$", "€"}

func TestSplitterMatchesRegex(t *testing.T) {
	var texts []string
	for _, name := range []string{"qwen3", "llama3_1"} {
		for _, c := range readGolden(t, name) {
			if c.Kind == "encode" {
				texts = append(texts, c.Text)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 500
	}
	for range n {
		var b strings.Builder
		for range 1 + r.IntN(30) {
			b.WriteString(splitAlphabet[r.IntN(len(splitAlphabet))])
		}
		texts = append(texts, b.String())
	}
	for name, p := range splitPatterns {
		t.Run(name, func(t *testing.T) {
			for _, s := range texts {
				checkSplitEqual(t, p, s)
			}
		})
	}
}

// FuzzSplitter: go test ./tokenizer -run '^$' -fuzz FuzzSplitter
func FuzzSplitter(f *testing.F) {
	for _, s := range []string{"", "a", "Hello world", " \n\n  x", "it's 'LL", "12345 678", "\u0085a", "a\ufeff b", "😀!!\r\n", "  \t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = toValidUTF8(s) // the splitter only ever sees valid UTF-8
		for _, p := range splitPatterns {
			checkSplitEqual(t, p, s)
		}
	})
}
