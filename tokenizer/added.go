package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         uint32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedMatcher finds added tokens in text, leftmost-longest like Hugging Face's
// Aho-Corasick matcher, before the text is normalized and pre-tokenized.
type addedMatcher struct {
	byFirst [256][]*addedToken // candidates by first byte, longest first
	any     bool
	firsts  string // the distinct first bytes, for a fast skip to the next candidate
}

func newAddedMatcher(tokens []*addedToken) *addedMatcher {
	m := &addedMatcher{}
	for _, t := range tokens {
		if t.content == "" {
			continue
		}
		m.byFirst[t.content[0]] = append(m.byFirst[t.content[0]], t)
		m.any = true
	}
	for i := range m.byFirst {
		if len(m.byFirst[i]) > 0 {
			m.firsts += string(rune(i))
		}
		sort.SliceStable(m.byFirst[i], func(a, b int) bool {
			return len(m.byFirst[i][a].content) > len(m.byFirst[i][b].content)
		})
	}
	return m
}

// segment is a piece of input: either text to tokenize or an added token.
type segment struct {
	text  string
	token *addedToken // nil for text
}

// split appends the segments of s to dst.
func (m *addedMatcher) split(dst []segment, s string) []segment {
	if !m.any {
		return append(dst, segment{text: s})
	}
	textStart := 0 // start of the pending text segment
	for i := 0; i < len(s); {
		cands := m.byFirst[s[i]]
		if len(cands) == 0 {
			next := m.nextCandidate(s[i+1:])
			if next < 0 {
				break
			}
			i += 1 + next
			continue
		}
		var hit *addedToken
		for _, t := range cands {
			if len(s)-i >= len(t.content) && s[i:i+len(t.content)] == t.content {
				hit = t
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		start, end := i, i+len(hit.content)
		if hit.singleWord && !(isWordBoundaryBefore(s, start) && isWordBoundaryAfter(s, end)) {
			i = end // the match is discarded, and the matcher moves past it
			continue
		}
		if hit.lstrip {
			for start > textStart {
				r, size := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= size
			}
		}
		if hit.rstrip {
			for end < len(s) {
				r, size := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += size
			}
		}
		if start > textStart {
			dst = append(dst, segment{text: s[textStart:start]})
		}
		dst = append(dst, segment{token: hit})
		i, textStart = end, end
	}
	if textStart < len(s) {
		dst = append(dst, segment{text: s[textStart:]})
	}
	return dst
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }

func isWordBoundaryBefore(s string, i int) bool {
	if i == 0 {
		return true
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return !isWordRune(r)
}

func isWordBoundaryAfter(s string, i int) bool {
	if i == len(s) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return !isWordRune(r)
}

// nextCandidate returns the index in s of the next byte that starts an added
// token, or -1. With ASCII first bytes (every known model) it uses the vectorized
// strings.IndexByte / IndexAny.
func (m *addedMatcher) nextCandidate(s string) int {
	if len(m.firsts) == 1 {
		return strings.IndexByte(s, m.firsts[0])
	}
	if len(m.firsts) == len([]rune(m.firsts)) { // all ASCII
		return strings.IndexAny(s, m.firsts)
	}
	for i := 0; i < len(s); i++ {
		if len(m.byFirst[s[i]]) > 0 {
			return i
		}
	}
	return -1
}
