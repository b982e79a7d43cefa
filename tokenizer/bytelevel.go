package tokenizer

import "unicode/utf8"

// The byte-level alphabet of GPT-2 style BPE: every byte 0..255 is shown as one
// printable rune, so vocabularies can store arbitrary bytes as text. Printable
// Latin-1 bytes map to themselves; the rest map to U+0100 onwards, in byte order.
var (
	byteToRune [256]rune
	// runeToByte is the inverse: byte+1 for runes of the alphabet, 0 for the rest.
	// The alphabet ends at U+0143, so a flat table replaces a map (the loader
	// decodes ~150k vocabulary entries with it).
	runeToByte [alphabetEnd]uint16
)

const alphabetEnd = 0x144 // one past the highest rune of the alphabet

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = uint16(b) + 1
	}
}

func byteOfRune(r rune) (byte, bool) {
	if r < 0 || r >= alphabetEnd || runeToByte[r] == 0 {
		return 0, false
	}
	return byte(runeToByte[r] - 1), true
}

// byteLevelDecode maps a byte-level token string back to its raw bytes. ok is false
// when the string holds a rune outside the alphabet (e.g. an added token written
// in plain text); the caller then uses the token's own UTF-8 bytes.
func byteLevelDecode(dst []byte, s string) ([]byte, bool) {
	start := len(dst)
	for _, r := range s {
		b, ok := byteOfRune(r)
		if !ok {
			return dst[:start], false
		}
		dst = append(dst, b)
	}
	return dst, true
}

// byteLevelDecodeBytes is byteLevelDecode for a byte slice (invalid UTF-8 is
// outside the alphabet, as U+FFFD is for the string form).
func byteLevelDecodeBytes(dst []byte, s []byte) ([]byte, bool) {
	start := len(dst)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < '!' || c > '~' {
				return dst[:start], false
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		b, ok := byteOfRune(r)
		if !ok || r == utf8.RuneError {
			return dst[:start], false
		}
		dst = append(dst, b)
		i += size
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
