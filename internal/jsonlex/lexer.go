package jsonlex

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// Lexer walks Data from Pos. Callers embed it and read Data and Pos directly;
// every method that fails leaves Pos wherever it stopped (the caller gives up).
type Lexer struct {
	Data []byte
	Pos  int
}

// WS skips JSON whitespace (space, tab, LF, CR).
func (l *Lexer) WS() {
	for l.Pos < len(l.Data) {
		switch l.Data[l.Pos] {
		case ' ', '\t', '\n', '\r':
			l.Pos++
		default:
			return
		}
	}
}

// Peek returns the byte at Pos, or 0 at the end.
func (l *Lexer) Peek() byte {
	if l.Pos < len(l.Data) {
		return l.Data[l.Pos]
	}
	return 0
}

// Consume passes c if it is the byte at Pos.
func (l *Lexer) Consume(c byte) bool {
	if l.Pos < len(l.Data) && l.Data[l.Pos] == c {
		l.Pos++
		return true
	}
	return false
}

// End reports whether only whitespace follows Pos.
func (l *Lexer) End() bool {
	l.WS()
	return l.Pos == len(l.Data)
}

// Literal passes lit ("true", "false", "null") if it is next.
func (l *Lexer) Literal(lit string) bool {
	if len(l.Data)-l.Pos >= len(lit) && string(l.Data[l.Pos:l.Pos+len(lit)]) == lit {
		l.Pos += len(lit)
		return true
	}
	return false
}

// Null passes a null literal if one is next.
func (l *Lexer) Null() bool { return l.Peek() == 'n' && l.Literal("null") }

// Bool reads a true or false literal.
func (l *Lexer) Bool() (v, ok bool) {
	if l.Literal("true") {
		return true, true
	}
	if l.Literal("false") {
		return false, true
	}
	return false, false
}

// Number passes a number in strict JSON grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns its text (a
// sub-slice of Data). Whether the value fits the caller's type is the caller's.
func (l *Lexer) Number() ([]byte, bool) {
	b, start := l.Data, l.Pos
	i := start
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		d := i + 1
		if i = digits(b, d); i == d {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		if i = digits(b, d); i == d {
			return nil, false
		}
	}
	l.Pos = i
	return b[start:i], true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// stringEnd finds the end of the string whose opening quote is at Pos: it
// returns the index just past the closing quote and whether the content holds
// escapes or non-ASCII bytes. A raw control byte or a missing closing quote is
// !ok. Escapes are passed (backslash and the next byte), not checked.
func (l *Lexer) stringEnd() (end int, escaped, nonASCII, ok bool) {
	b := l.Data
	i := l.Pos + 1
	for {
		// Eight bytes at a time: stop at a word holding '"', '\\' or a control
		// byte. Borrows can only flag bytes above the first real hit, and
		// TrailingZeros takes the lowest, so the stop is exact.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			q := x ^ (lsb * '"')
			bs := x ^ (lsb * '\\')
			special := ((q - lsb) &^ q) | ((bs - lsb) &^ bs) | ((x - lsb*0x20) &^ x)
			nonASCII = nonASCII || x&msb != 0
			if special&msb != 0 {
				i += bits.TrailingZeros64(special&msb) / 8
				break
			}
			i += 8
		}
		if i >= len(b) {
			return 0, false, false, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped, nonASCII, true
		case c == '\\':
			escaped = true
			i += 2
		case c < 0x20:
			return 0, false, false, false
		default:
			nonASCII = nonASCII || c >= utf8.RuneSelf
			i++
		}
		if i > len(b) {
			return 0, false, false, false
		}
	}
}

// RawString passes the string at Pos (which must be '"') and returns its raw
// content, between the quotes, as a sub-slice of Data, and whether it holds
// escapes. !ok for a syntax error and for invalid UTF-8 (which encoding/json
// would replace). The escapes themselves are checked by Unescape, which a caller
// must run when escaped is true.
func (l *Lexer) RawString() (raw []byte, escaped, ok bool) {
	if l.Peek() != '"' {
		return nil, false, false
	}
	end, escaped, nonASCII, ok := l.stringEnd()
	if !ok {
		return nil, false, false
	}
	raw = l.Data[l.Pos+1 : end-1]
	// Escapes decode to whole UTF-8 sequences of valid runes, so the decoded
	// string is valid exactly when raw is.
	if nonASCII && !utf8.Valid(raw) {
		return nil, false, false
	}
	l.Pos = end
	return raw, escaped, true
}

// String reads the string at Pos and returns its decoded bytes: a sub-slice of
// Data when it has no escapes, else appended to scratch[:0] (the caller keeps
// the result as its next scratch). !ok on anything encoding/json would reject or
// alter.
func (l *Lexer) String(scratch []byte) ([]byte, bool) {
	raw, escaped, ok := l.RawString()
	if !ok || !escaped {
		return raw, ok
	}
	return Unescape(scratch[:0], raw)
}

// Unescape appends the decoded content of raw (a string's bytes between the
// quotes) to dst. A surrogate pair becomes its rune; a lone surrogate, an unknown
// escape or a short \u is !ok (encoding/json would substitute U+FFFD or fail).
// raw's other bytes are copied as they are: RawString has checked them.
func Unescape(dst, raw []byte) ([]byte, bool) {
	for len(raw) > 0 {
		k := bytes.IndexByte(raw, '\\')
		if k < 0 {
			return append(dst, raw...), true
		}
		dst = append(dst, raw[:k]...)
		if k+1 >= len(raw) {
			return nil, false
		}
		switch raw[k+1] {
		case '"', '\\', '/':
			dst = append(dst, raw[k+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw, k+2)
			if !ok {
				return nil, false
			}
			n := 6
			switch {
			case r >= 0xDC00 && r < 0xE000:
				return nil, false // lone low surrogate
			case r >= 0xD800 && r < 0xDC00:
				if k+7 >= len(raw) || raw[k+6] != '\\' || raw[k+7] != 'u' {
					return nil, false // lone high surrogate
				}
				lo, ok := hex4(raw, k+8)
				if !ok || lo < 0xDC00 || lo >= 0xE000 {
					return nil, false
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				n = 12
			}
			dst = utf8.AppendRune(dst, r)
			raw = raw[k+n:]
			continue
		default:
			return nil, false
		}
		raw = raw[k+2:]
	}
	return dst, true
}

// hex4 reads the four hex digits at b[i:].
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
