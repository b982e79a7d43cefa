package tokenizer

import (
	"strings"

	"github.com/kvroute/kvroute/internal/jsonlex"
)

// The loader's fast path. tokenizer.json is ~10 MB, nearly all of it model.vocab
// (~150k "token": id pairs) and model.merges (~150k–300k rules); decoding that with
// encoding/json into a map and string slices took 1–3 s (20–30 s under the race
// detector). scanTokenizerJSON reads those two members with a purpose-built
// scanner (on internal/jsonlex's primitives) straight into the flat vocabulary
// and merge triples, and hands encoding/json only the small rest (the
// "skeleton": the document with the two members cut out), which the component
// parsers read as before.
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

// jscan reads tokenizer.json with jsonlex's primitives.
type jscan struct {
	jsonlex.Lexer
	buf  []byte // unescaped string scratch
	left []byte // the first half of a merge pair while the second is read
}

// eat consumes c after optional whitespace.
func (s *jscan) eat(c byte) bool {
	s.WS()
	return s.Consume(c)
}

func (s *jscan) peek() byte {
	s.WS()
	return s.Peek()
}

// readString reads the string after optional whitespace and returns its decoded
// bytes: a sub-slice of the input when it has no escapes, else s.buf (valid until
// the next call). !ok for invalid syntax and for what encoding/json would alter
// (invalid UTF-8, lone surrogates).
func (s *jscan) readString() ([]byte, bool) {
	s.WS()
	raw, escaped, ok := s.RawString()
	if !ok || !escaped {
		return raw, ok
	}
	if s.buf, ok = jsonlex.Unescape(s.buf[:0], raw); !ok {
		return nil, false
	}
	return s.buf, true
}

// readUint32 reads a JSON number that encoding/json would store in a uint32
// without error: digits only, no leading zero, no fraction or exponent, ≤ 2³²−1.
func (s *jscan) readUint32() (uint32, bool) {
	s.WS()
	b, i := s.Data, s.Pos
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		return 0, false
	}
	var v uint64
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + uint64(b[i]-'0')
			if v > 1<<32-1 {
				return 0, false
			}
			i++
		}
	}
	if i < len(b) {
		if c := b[i]; c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9') {
			return 0, false
		}
	}
	s.Pos = i
	return uint32(v), true
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
	s := &jscan{Lexer: jsonlex.Lexer{Data: data}}
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
				s.WS()
				modelStart = s.Pos
				if body, members, ok = s.scanModel(); !ok {
					return nil, nil, false
				}
				modelEnd = s.Pos
			} else if !s.Skip(maxScanDepth) {
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
	if s.WS(); s.Pos != len(data) || modelStart < 0 {
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
			s.WS()
			keyStart := s.Pos
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
				vb = newVocabBuilder(len(s.Data)/70+16, len(s.Data)/10)
				if !s.scanVocab(vb) {
					return nil, nil, false
				}
				if mergesAt >= 0 {
					end := s.Pos
					s.Pos = mergesAt
					if res = vb.resolver(); !s.scanMerges(res) {
						return nil, nil, false
					}
					s.Pos = end
				}
			case k == "merges":
				if mergesAt >= 0 || res != nil {
					return nil, nil, false
				}
				s.WS()
				if vb == nil {
					mergesAt = s.Pos
					if !s.Skip(maxScanDepth) {
						return nil, nil, false
					}
				} else if res = vb.resolver(); !s.scanMerges(res) {
					return nil, nil, false
				}
			case strings.EqualFold(k, "vocab"), strings.EqualFold(k, "merges"):
				return nil, nil, false // encoding/json would match it to the field
			default:
				if !s.Skip(maxScanDepth) {
					return nil, nil, false
				}
				members = append(members, [2]int{keyStart, s.Pos})
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
