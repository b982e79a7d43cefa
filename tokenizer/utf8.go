package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// toValidUTF8 replaces every maximal ill-formed subsequence of s with U+FFFD, the
// rule of the WHATWG decoder (JavaScript's TextDecoder, Node's Buffer.toString)
// and Rust's String::from_utf8_lossy: a truncated multi-byte sequence becomes one
// U+FFFD, a stray byte becomes one U+FFFD. Valid strings are returned unchanged.
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			b.WriteByte(s[i])
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || size > 1 {
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += maximalSubpart(s[i:])
	}
	return b.String()
}

// maximalSubpart is the length of the ill-formed prefix of s that one U+FFFD
// replaces (Unicode 15, section 3.9, table 3-7).
func maximalSubpart(s string) int {
	b0 := s[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case b0 >= 0xC2 && b0 <= 0xDF:
		need = 1
	case b0 == 0xE0:
		need, lo = 2, 0xA0
	case b0 >= 0xE1 && b0 <= 0xEC, b0 == 0xEE, b0 == 0xEF:
		need = 2
	case b0 == 0xED:
		need, hi = 2, 0x9F
	case b0 == 0xF0:
		need, lo = 3, 0x90
	case b0 >= 0xF1 && b0 <= 0xF3:
		need = 3
	case b0 == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(s); k++ {
		c := s[n]
		if k == 0 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		n++
	}
	return n
}

// lossyUTF8 turns decoded bytes into a string the way from_utf8_lossy does.
func lossyUTF8(b []byte) string { return toValidUTF8(string(b)) }
