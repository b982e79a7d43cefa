package jsonlex

import "bytes"

// SkipString passes the string at Pos checking only its syntax, as encoding/json
// does for a value it discards: a closing quote, no raw control byte, known
// escapes with four hex digits after \u. Invalid UTF-8 and lone surrogates are
// accepted (encoding/json accepts them there too).
func (l *Lexer) SkipString() bool {
	if l.Peek() != '"' {
		return false
	}
	end, escaped, _, ok := l.stringEnd()
	if !ok {
		return false
	}
	if escaped && !validEscapes(l.Data[l.Pos+1:end-1]) {
		return false
	}
	l.Pos = end
	return true
}

func validEscapes(raw []byte) bool {
	for {
		k := bytes.IndexByte(raw, '\\')
		if k < 0 {
			return true
		}
		if k+1 >= len(raw) {
			return false
		}
		switch raw[k+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			raw = raw[k+2:]
		case 'u':
			if _, ok := hex4(raw, k+2); !ok {
				return false
			}
			raw = raw[k+6:]
		default:
			return false
		}
	}
}

// Skip passes one value at Pos (after optional whitespace), checking its syntax
// as encoding/json would when it discards the value. depth is the nesting the
// value may still open: an object or array nested deeper is !ok (the caller
// falls back; encoding/json allows 10000).
func (l *Lexer) Skip(depth int) bool {
	l.WS()
	switch l.Peek() {
	case '{':
		if depth <= 0 {
			return false
		}
		l.Pos++
		l.WS()
		if l.Consume('}') {
			return true
		}
		for {
			l.WS()
			if !l.SkipString() {
				return false
			}
			l.WS()
			if !l.Consume(':') || !l.Skip(depth-1) {
				return false
			}
			l.WS()
			if l.Consume(',') {
				continue
			}
			return l.Consume('}')
		}
	case '[':
		if depth <= 0 {
			return false
		}
		l.Pos++
		l.WS()
		if l.Consume(']') {
			return true
		}
		for {
			if !l.Skip(depth - 1) {
				return false
			}
			l.WS()
			if l.Consume(',') {
				continue
			}
			return l.Consume(']')
		}
	case '"':
		return l.SkipString()
	case 't':
		return l.Literal("true")
	case 'f':
		return l.Literal("false")
	case 'n':
		return l.Literal("null")
	default:
		_, ok := l.Number()
		return ok
	}
}
