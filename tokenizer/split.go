package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The Split patterns of the supported model families, as tokenizer.json spells them.
const (
	// qwenPattern: Qwen2, Qwen2.5, Qwen3 (digits one by one).
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// llama3Pattern: Llama 3, 3.1, 3.2, 3.3 (digits in runs of up to three).
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// knownSplitter returns a hand-written splitter for a pattern it reproduces
// exactly (proven against regexp2 by the tests and a fuzz target), or nil.
func knownSplitter(pattern string) splitter {
	switch pattern {
	case qwenPattern:
		return modernSplitter{maxDigits: 1}
	case llama3Pattern:
		return modernSplitter{maxDigits: 3}
	case gpt2Pattern:
		return gpt2Splitter{}
	}
	return nil
}

// Character classes of the patterns. \s is Unicode White_Space, as in the
// Oniguruma engine Hugging Face's Rust tokenizers (and so vLLM) use; Go's
// unicode.IsSpace is exactly that set.
const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for b := 0; b < utf8.RuneSelf; b++ {
		asciiClass[b] = classOfSlow(rune(b))
	}
}

func classOfSlow(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// classAt returns the class and size of the rune at s[i].
func classAt(s string, i int) (uint8, rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	return classOfSlow(r), r, size
}

// runOf returns the end of the run of class cls starting at i.
func runOf(s string, i int, cls uint8) int {
	for i < len(s) {
		c, _, size := classAt(s, i)
		if c != cls {
			break
		}
		i += size
	}
	return i
}

// contraction returns the length of a contraction ('s 't 're 've 'm 'll 'd) at
// s[i] (an apostrophe), or 0. fold makes it case-insensitive under Unicode simple
// case folding, where the only non-ASCII letter folding into the set is 'ſ'.
func contraction(s string, i int, fold bool) int {
	if i+1 >= len(s) {
		return 0
	}
	if fold && len(s) >= i+3 && s[i+1] == 0xC5 && s[i+2] == 0xBF {
		return 3 // U+017F LATIN SMALL LETTER LONG S case-folds to 's'
	}
	lower := func(b byte) byte {
		if fold && b >= 'A' && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return 3
		}
	}
	return 0
}

// whitespaceEnd applies the pattern tail `\s+(?!\S)|\s+` to the whitespace run
// s[i:j]: the run minus its last rune when a non-space follows and the run has
// more than one rune, else the whole run.
func whitespaceEnd(s string, i, j int) int {
	if j == len(s) {
		return j
	}
	_, lastSize := utf8.DecodeLastRuneInString(s[:j])
	if j-lastSize > i {
		return j - lastSize
	}
	return j
}

// modernSplitter is the Qwen / Llama 3 pattern:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
type modernSplitter struct{ maxDigits int }

func (m modernSplitter) appendSplits(dst []string, s string) []string {
	for i := 0; i < len(s); {
		end := m.matchAt(s, i)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

// matchAt returns the end of the pattern's match at i (every rune starts one).
func (m modernSplitter) matchAt(s string, i int) int {
	cls, r, size := classAt(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == clsLetter {
		return runOf(s, i+size, clsLetter)
	}
	if cls != clsNumber && r != '\r' && r != '\n' && i+size < len(s) {
		if c2, _, _ := classAt(s, i+size); c2 == clsLetter {
			return runOf(s, i+size, clsLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if cls == clsNumber {
		j := i + size
		for k := 1; k < m.maxDigits && j < len(s); k++ {
			c, _, sz := classAt(s, j)
			if c != clsNumber {
				break
			}
			j += sz
		}
		return j
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n]*
	start := i
	if r == ' ' && i+1 < len(s) {
		if c2, _, _ := classAt(s, i+1); c2 == clsOther {
			start = i + 1
			cls = clsOther
		}
	}
	if cls == clsOther {
		j := runOf(s, start, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// Whitespace: \s*[\r\n]+ ends after the run's last \r or \n; else \s+(?!\S) | \s+.
	j := runOf(s, i, clsSpace)
	for k := j - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	return whitespaceEnd(s, i, j)
}

// gpt2Splitter is GPT-2's pattern, used by the ByteLevel pre-tokenizer's use_regex:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
type gpt2Splitter struct{}

func (gpt2Splitter) appendSplits(dst []string, s string) []string {
	for i := 0; i < len(s); {
		end := gpt2MatchAt(s, i)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

func gpt2MatchAt(s string, i int) int {
	cls, r, _ := classAt(s, i)
	if r == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	start := i
	if r == ' ' && i+1 < len(s) {
		if c2, _, _ := classAt(s, i+1); c2 != clsSpace {
			start, cls = i+1, c2
		}
	}
	if cls != clsSpace {
		return runOf(s, start, cls)
	}
	return whitespaceEnd(s, i, runOf(s, i, clsSpace))
}
