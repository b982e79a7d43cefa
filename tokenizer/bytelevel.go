package tokenizer

import "unicode/utf8"

// The byte-level alphabet of GPT-2 style BPE: every byte 0..255 is shown as one
// printable rune, so vocabularies can store arbitrary bytes as text. Printable
// Latin-1 bytes map to themselves; the rest map to U+0100 onwards, in byte order.
var (
	byteToRune [256]rune
	runeToByte = make(map[rune]byte, 256)
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode maps a byte-level token string back to its raw bytes. ok is false
// when the string holds a rune outside the alphabet (e.g. an added token written
// in plain text); the caller then uses the token's own UTF-8 bytes.
func byteLevelDecode(dst []byte, s string) ([]byte, bool) {
	start := len(dst)
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			return dst[:start], false
		}
		dst = append(dst, b)
	}
	return dst, true
}

// byteLevelEncode maps raw bytes to the byte-level alphabet.
func byteLevelEncode(dst []byte, raw string) []byte {
	for i := 0; i < len(raw); i++ {
		dst = utf8.AppendRune(dst, byteToRune[raw[i]])
	}
	return dst
}
