package jsonlex

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzMatchesEncodingJSON: every primitive either gives up or reads a document
// exactly as encoding/json does, and never gives up where the give-up rules do
// not say so.
//
//	go test ./internal/jsonlex -run '^$' -fuzz FuzzMatchesEncodingJSON
func FuzzMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`"plain"`, `"a\"b\\c\/d\b\f\n\r\t\u0041\u00e9\u20ac\u0000"`, `"\ud83d\ude00"`, `"\ud800"`,
		"\"bad \xff\"", `-2.5e3`, `0`, `01`, `1.`, `{"a":[1,true,false,null,{"b":"c"}]}`,
		`[1,]`, ` [ ] `, `"\q"`, `nul`, "\"café ☕\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		valid := json.Valid(doc)

		// Skip with a budget no document can exceed: exactly json.Valid.
		l := &Lexer{Data: doc}
		if ok := l.Skip(len(doc)+1) && l.End(); ok != valid {
			t.Fatalf("Skip+End = %v, json.Valid = %v: %q", ok, valid, doc)
		}

		// String: what it accepts, encoding/json decodes to the same bytes.
		l = &Lexer{Data: doc}
		l.WS()
		v, ok := l.String(nil)
		if ok && l.End() {
			var want string
			if err := json.Unmarshal(doc, &want); err != nil {
				t.Fatalf("String accepted what encoding/json rejects (%v): %q", err, doc)
			}
			if string(v) != want {
				t.Fatalf("String = %q, encoding/json = %q: %q", v, want, doc)
			}
		}
		// ... and it gives up on a valid string only where encoding/json
		// substitutes U+FFFD: invalid UTF-8 or a lone surrogate escape.
		if valid && !ok && bytes.HasPrefix(bytes.TrimLeft(doc, " \t\r\n"), []byte(`"`)) {
			var want string
			if json.Unmarshal(doc, &want) == nil && !bytes.ContainsRune([]byte(want), utf8.RuneError) {
				t.Fatalf("String gave up on %q, which encoding/json decodes cleanly to %q", doc, want)
			}
		}

		// Number: the text it passes is the number encoding/json reads.
		l = &Lexer{Data: doc}
		l.WS()
		text, ok := l.Number()
		if ok && l.End() != valid {
			t.Fatalf("Number passed %q but json.Valid = %v: %q", text, valid, doc)
		}
		if ok && valid {
			var n json.Number
			if err := json.Unmarshal(doc, &n); err != nil || string(n) != string(text) {
				t.Fatalf("Number = %q, encoding/json = %q (%v)", text, n, err)
			}
		}
		if !ok && valid {
			if c := bytes.TrimLeft(doc, " \t\r\n")[0]; c == '-' || (c >= '0' && c <= '9') {
				t.Fatalf("Number refused the valid number %q", doc)
			}
		}

		// Round trip: any valid UTF-8 text, marshalled by encoding/json, is read
		// back unchanged.
		if utf8.Valid(doc) {
			enc, _ := json.Marshal(string(doc))
			l = &Lexer{Data: enc}
			if v, ok := l.String(nil); !ok || string(v) != string(doc) || !l.End() {
				t.Fatalf("String(%q) = %q, %v; want %q", enc, v, ok, doc)
			}
		}
	})
}
