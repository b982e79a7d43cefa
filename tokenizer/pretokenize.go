package tokenizer

import (
	"encoding/json"
	"fmt"

	"github.com/dlclark/regexp2/v2"
)

// splitter appends the Isolated split of s: every match and every gap between
// matches, in order, as substrings of s (no copies).
type splitter interface {
	appendSplits(dst []string, s string) []string
}

// preStep is one pre-tokenizer of the pipeline; it refines every piece.
type preStep interface {
	apply(dst []string, piece string) []string
}

// splitStep is the Split pre-tokenizer with the Isolated or Removed behavior.
type splitStep struct {
	sp      splitter
	removed bool // Removed: drop the matches, keep the gaps
	pattern string
}

func (s *splitStep) apply(dst []string, piece string) []string {
	if !s.removed {
		return s.sp.appendSplits(dst, piece)
	}
	// Removed keeps only the gaps; a splitter that reports matches and gaps
	// interleaved cannot tell them apart, so Removed uses the regex directly.
	return s.sp.(*regexSplitter).appendGaps(dst, piece)
}

// byteLevelStep is the ByteLevel pre-tokenizer. The BPE model works on raw bytes
// (its vocabulary is decoded from the byte-level alphabet at load), so the byte
// mapping itself is free; what remains is the optional GPT-2 split and prefix space.
type byteLevelStep struct {
	addPrefixSpace bool
	sp             splitter // nil when use_regex is false
}

func (b *byteLevelStep) apply(dst []string, piece string) []string {
	if b.addPrefixSpace && (len(piece) == 0 || piece[0] != ' ') {
		piece = " " + piece
	}
	if b.sp == nil {
		return append(dst, piece)
	}
	return b.sp.appendSplits(dst, piece)
}

// digitsStep is the Digits pre-tokenizer: ASCII digits isolated, one by one or in runs.
type digitsStep struct{ individual bool }

func (d digitsStep) apply(dst []string, piece string) []string {
	start := 0
	for i := 0; i < len(piece); {
		if piece[i] < '0' || piece[i] > '9' {
			i++
			continue
		}
		if i > start {
			dst = append(dst, piece[start:i])
		}
		j := i + 1
		if !d.individual {
			for j < len(piece) && piece[j] >= '0' && piece[j] <= '9' {
				j++
			}
		}
		dst = append(dst, piece[i:j])
		i, start = j, j
	}
	if start < len(piece) {
		dst = append(dst, piece[start:])
	}
	return dst
}

// gpt2Pattern is the split the ByteLevel pre-tokenizer applies with use_regex.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// preTokenizer is the parsed pre_tokenizer pipeline.
type preTokenizer struct {
	steps     []preStep
	byteLevel bool // a ByteLevel step is present (required by the BPE model)
}

// split appends the pre-tokens of s to dst.
func (p *preTokenizer) split(dst []string, s string, scratch []string) ([]string, []string) {
	if len(p.steps) == 0 {
		return append(dst, s), scratch
	}
	cur := append(scratch[:0], s)
	for i, st := range p.steps {
		if i == len(p.steps)-1 {
			for _, piece := range cur {
				dst = st.apply(dst, piece)
			}
			return dst, cur
		}
		var next []string
		for _, piece := range cur {
			next = st.apply(next, piece)
		}
		cur = next
	}
	return dst, cur
}

func parsePreTokenizer(raw json.RawMessage, p *preTokenizer) error {
	if isNull(raw) {
		return nil
	}
	typ, err := componentType(raw)
	if err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch typ {
	case "Sequence":
		var q struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &q); err != nil {
			return fmt.Errorf("pre_tokenizer Sequence: %w", err)
		}
		for _, sub := range q.PreTokenizers {
			if err := parsePreTokenizer(sub, p); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		var s struct {
			Pattern struct {
				String *string `json:"String"`
				Regex  *string `json:"Regex"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		if s.Invert {
			return fmt.Errorf("%w: pre_tokenizer Split with invert=true", ErrUnsupported)
		}
		if s.Behavior != "Isolated" && s.Behavior != "Removed" {
			return fmt.Errorf("%w: pre_tokenizer Split behavior %q", ErrUnsupported, s.Behavior)
		}
		var pattern string
		switch {
		case s.Pattern.Regex != nil:
			pattern = *s.Pattern.Regex
		case s.Pattern.String != nil:
			pattern = regexp2.Escape(*s.Pattern.String)
		default:
			return fmt.Errorf("pre_tokenizer Split: missing pattern")
		}
		sp, err := newSplitter(pattern, s.Behavior == "Removed")
		if err != nil {
			return err
		}
		p.steps = append(p.steps, &splitStep{sp: sp, removed: s.Behavior == "Removed", pattern: pattern})
		return nil
	case "ByteLevel":
		var b struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &b); err != nil {
			return fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
		}
		st := &byteLevelStep{addPrefixSpace: b.AddPrefixSpace}
		if b.UseRegex == nil || *b.UseRegex {
			sp, err := newSplitter(gpt2Pattern, false)
			if err != nil {
				return err
			}
			st.sp = sp
		}
		// Without a prefix space or a split the step passes pieces through
		// unchanged (the byte mapping is in the vocabulary): leave it out, so
		// Qwen's pipeline is one split with no intermediate list.
		if st.addPrefixSpace || st.sp != nil {
			p.steps = append(p.steps, st)
		}
		p.byteLevel = true
		return nil
	case "Digits":
		var d struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		p.steps = append(p.steps, digitsStep{individual: d.IndividualDigits})
		return nil
	default:
		return fmt.Errorf("%w: pre_tokenizer %q", ErrUnsupported, typ)
	}
}

// newSplitter returns the fastest exact splitter for pattern: a hand-written
// one for the patterns of the supported model families, else a regexp2 one.
func newSplitter(pattern string, removed bool) (splitter, error) {
	if !removed {
		if sp := knownSplitter(pattern); sp != nil {
			return sp, nil
		}
	}
	return newRegexSplitter(pattern)
}

// regexSplitter splits with regexp2, which has the lookahead and Unicode classes
// the tokenizer.json patterns use (Go's regexp has neither).
type regexSplitter struct{ re *regexp2.Regexp }

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("%w: pre_tokenizer Split regex %q: %v", ErrUnsupported, pattern, err)
	}
	return &regexSplitter{re: re}, nil
}

// each calls fn(start, end, isMatch) for every match and gap, in byte offsets.
func (r *regexSplitter) each(s string, fn func(start, end int, match bool)) {
	pos := 0
	m, err := r.re.FindStringMatch(s)
	for err == nil && m != nil {
		idx, n := m.ByteRange()
		if n > 0 { // an empty match splits nothing
			if idx > pos {
				fn(pos, idx, false)
			}
			fn(idx, idx+n, true)
			pos = idx + n
		}
		m, err = r.re.FindNextMatch(m)
	}
	if pos < len(s) {
		fn(pos, len(s), false)
	}
}

func (r *regexSplitter) appendSplits(dst []string, s string) []string {
	r.each(s, func(start, end int, _ bool) { dst = append(dst, s[start:end]) })
	return dst
}

func (r *regexSplitter) appendGaps(dst []string, s string) []string {
	r.each(s, func(start, end int, match bool) {
		if !match {
			dst = append(dst, s[start:end])
		}
	})
	return dst
}
