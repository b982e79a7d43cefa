package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// The loader's fast path. tokenizer.json is ~10 MB, nearly all of it model.vocab
// (~150k "token": id pairs) and model.merges (~150k–300k rules); decoding that with
// encoding/json into a map and string slices took 1–3 s (20–30 s under the race
// detector). scanTokenizerJSON reads those two members with a purpose-built
// scanner straight into the flat vocabulary and merge triples, and hands
// encoding/json only the small rest (the "skeleton": the document with the two
// members cut out), which the component parsers read as before.
//
// The scanner is deliberately partial and strict: it accepts only input it decodes
// exactly as encoding/json would, and reports !ok on anything else — a syntax
// error, a key spelled with different case ("Vocab": encoding/json matches field
// names case-insensitively), a duplicated member, a lone-surrogate escape or
// invalid UTF-8 in a token (encoding/json substitutes U+FFFD), an id that is not a
// plain uint32, merges in neither form — and the loader then decodes the whole
// file with encoding/json as before (parseBPE's generic path), so encoding/json
// alone decides every unusual case and every error message.

// maxScanDepth bounds nesting in skipped values; deeper input goes to encoding/json.
const maxScanDepth = 512

type jscan struct {
	b    []byte
	i    int
	buf  []byte // unescaped string scratch
	left []byte // the first half of a merge pair while the second is read
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat consumes c after optional whitespace.
func (s *jscan) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// readString reads the string at s.i and returns its decoded bytes: a sub-slice
// of the input when it has no escapes, else s.buf (valid until the next call).
// !ok for invalid syntax and for what encoding/json would alter (invalid UTF-8,
// lone surrogates).
func (s *jscan) readString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	var hi byte
	for i := start; i < len(s.b); i++ {
		c := s.b[i]
		switch {
		case c == '"':
			s.i = i + 1
			v := s.b[start:i]
			if hi >= utf8.RuneSelf && !utf8.Valid(v) {
				return nil, false
			}
			return v, true
		case c == '\\':
			return s.readEscaped(start, i)
		case c < 0x20:
			return nil, false
		}
		hi |= c
	}
	return nil, false
}

func (s *jscan) readEscaped(start, i int) ([]byte, bool) {
	buf := append(s.buf[:0], s.b[start:i]...)
	for i < len(s.b) {
		c := s.b[i]
		switch {
		case c == '"':
			s.i, s.buf = i+1, buf
			if !utf8.Valid(buf) {
				return nil, false
			}
			return buf, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(s.b) {
			return nil, false
		}
		switch e := s.b[i+1]; e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(s.b, i+2)
			if !ok {
				return nil, false
			}
			switch {
			case r >= 0xDC00 && r < 0xE000:
				return nil, false // lone low surrogate
			case r >= 0xD800 && r < 0xDC00:
				if i+7 >= len(s.b) || s.b[i+6] != '\\' || s.b[i+7] != 'u' {
					return nil, false
				}
				lo, ok := hex4(s.b, i+8)
				if !ok || lo < 0xDC00 || lo >= 0xE000 {
					return nil, false
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			buf = utf8.AppendRune(buf, r)
			i += 4
		default:
			return nil, false
		}
		i += 2
	}
	return nil, false
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// readUint32 reads a JSON number that encoding/json would store in a uint32
// without error: digits only, no leading zero, no fraction or exponent, ≤ 2³²−1.
func (s *jscan) readUint32() (uint32, bool) {
	s.ws()
	i := s.i
	if i >= len(s.b) || s.b[i] < '0' || s.b[i] > '9' {
		return 0, false
	}
	var v uint64
	if s.b[i] == '0' {
		i++
	} else {
		for i < len(s.b) && s.b[i] >= '0' && s.b[i] <= '9' {
			v = v*10 + uint64(s.b[i]-'0')
			if v > 1<<32-1 {
				return 0, false
			}
			i++
		}
	}
	if i < len(s.b) {
		if c := s.b[i]; c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9') {
			return 0, false
		}
	}
	s.i = i
	return uint32(v), true
}

// skipValue consumes one JSON value, validating its syntax.
func (s *jscan) skipValue(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	switch s.peek() {
	case '{':
		s.i++
		if s.eat('}') {
			return true
		}
		for {
			if !s.skipString() || !s.eat(':') || !s.skipValue(depth+1) {
				return false
			}
			if s.eat(',') {
				continue
			}
			return s.eat('}')
		}
	case '[':
		s.i++
		if s.eat(']') {
			return true
		}
		for {
			if !s.skipValue(depth + 1) {
				return false
			}
			if s.eat(',') {
				continue
			}
			return s.eat(']')
		}
	case '"':
		return s.skipString()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		return s.skipNumber()
	}
}

func (s *jscan) literal(lit string) bool {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// skipString consumes a string checking only its syntax (escapes, control bytes).
func (s *jscan) skipString() bool {
	if !s.eat('"') {
		return false
	}
	for i := s.i; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(s.b) {
				return false
			}
			switch s.b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if _, ok := hex4(s.b, i+2); !ok {
					return false
				}
				i += 5
			default:
				return false
			}
		}
	}
	return false
}

// skipNumber consumes -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jscan) skipNumber() bool {
	b, i := s.b, s.i
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	s.i = i
	return true
}

// scanVocab reads the vocab object into b.
func (s *jscan) scanVocab(b *vocabBuilder) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		text, ok := s.readString()
		if !ok || !s.eat(':') {
			return false
		}
		id, ok := s.readUint32()
		if !ok {
			return false
		}
		b.add(text, id)
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// scanMerges reads the merges array in the "a b" form or the ["a", "b"] form
// (one form throughout) and passes every rule to r.
func (s *jscan) scanMerges(r *mergeResolver) bool {
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	pairs := s.peek() == '['
	for rank := 0; ; rank++ {
		if pairs {
			if !s.eat('[') {
				return false
			}
			left, ok := s.readString()
			if !ok || !s.eat(',') {
				return false
			}
			s.left = append(s.left[:0], left...)
			right, ok := s.readString()
			if !ok || !s.eat(']') {
				return false
			}
			r.add(rank, s.left, right)
		} else {
			rule, ok := s.readString()
			if !ok {
				return false
			}
			sp := -1
			for i, c := range rule {
				if c == ' ' {
					sp = i
					break
				}
			}
			if sp < 0 {
				return false // encoding/json's path reports the rule without a space
			}
			r.add(rank, rule[:sp], rule[sp+1:])
		}
		if s.eat(',') {
			continue
		}
		return s.eat(']')
	}
}

// scanTokenizerJSON is the fast path: the skeleton (data without model.vocab and
// model.merges) and the BPE body built from those two members, or !ok.
func scanTokenizerJSON(data []byte) (skeleton []byte, body *bpeBody, ok bool) {
	s := &jscan{b: data}
	if !s.eat('{') {
		return nil, nil, false
	}
	modelStart, modelEnd := -1, -1
	var members [][2]int // the model object's other members, as raw ranges
	if !s.eat('}') {
		for {
			key, ok := s.readString()
			if !ok || !s.eat(':') {
				return nil, nil, false
			}
			isModel := string(key) == "model"
			if !isModel && strings.EqualFold(string(key), "model") {
				return nil, nil, false // encoding/json would take it as "model"
			}
			if isModel {
				if modelStart >= 0 {
					return nil, nil, false // duplicated: encoding/json keeps the last
				}
				s.ws()
				modelStart = s.i
				if body, members, ok = s.scanModel(); !ok {
					return nil, nil, false
				}
				modelEnd = s.i
			} else if !s.skipValue(0) {
				return nil, nil, false
			}
			if s.eat(',') {
				continue
			}
			if !s.eat('}') {
				return nil, nil, false
			}
			break
		}
	}
	if s.ws(); s.i != len(data) || modelStart < 0 {
		return nil, nil, false
	}
	skeleton = make([]byte, 0, modelStart+len(data)-modelEnd+256)
	skeleton = append(skeleton, data[:modelStart]...)
	skeleton = append(skeleton, '{')
	for i, m := range members {
		if i > 0 {
			skeleton = append(skeleton, ',')
		}
		skeleton = append(skeleton, data[m[0]:m[1]]...)
	}
	skeleton = append(skeleton, '}')
	skeleton = append(skeleton, data[modelEnd:]...)
	return skeleton, body, true
}

// scanModel reads the model object: vocab and merges into a body, the other
// members' ranges for the skeleton.
func (s *jscan) scanModel() (*bpeBody, [][2]int, bool) {
	if !s.eat('{') {
		return nil, nil, false
	}
	var members [][2]int
	var vb *vocabBuilder
	mergesAt := -1 // merges met before vocab: read after it
	var res *mergeResolver
	if !s.eat('}') {
		for {
			s.ws()
			keyStart := s.i
			key, ok := s.readString()
			if !ok || !s.eat(':') {
				return nil, nil, false
			}
			switch k := string(key); {
			case k == "vocab":
				if vb != nil {
					return nil, nil, false
				}
				// ~70 bytes of JSON per entry (vocab and merges together).
				vb = newVocabBuilder(len(s.b)/70+16, len(s.b)/10)
				if !s.scanVocab(vb) {
					return nil, nil, false
				}
				if mergesAt >= 0 {
					end := s.i
					s.i = mergesAt
					if res = vb.resolver(); !s.scanMerges(res) {
						return nil, nil, false
					}
					s.i = end
				}
			case k == "merges":
				if mergesAt >= 0 || res != nil {
					return nil, nil, false
				}
				s.ws()
				if vb == nil {
					mergesAt = s.i
					if !s.skipValue(0) {
						return nil, nil, false
					}
				} else if res = vb.resolver(); !s.scanMerges(res) {
					return nil, nil, false
				}
			case strings.EqualFold(k, "vocab"), strings.EqualFold(k, "merges"):
				return nil, nil, false // encoding/json would match it to the field
			default:
				if !s.skipValue(0) {
					return nil, nil, false
				}
				members = append(members, [2]int{keyStart, s.i})
			}
			if s.eat(',') {
				continue
			}
			if !s.eat('}') {
				return nil, nil, false
			}
			break
		}
	}
	if vb == nil || res == nil {
		return nil, nil, false // no vocab or no merges: the generic path decides
	}
	err := vb.err
	if err == nil {
		err = res.err
	}
	return &bpeBody{vocab: res.v, merges: res.out, err: err}, members, true
}
