package jsonlex

import (
	"encoding/json"
	"strings"
	"testing"
)

func lex(s string) *Lexer { return &Lexer{Data: []byte(s)} }

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`""`, "", true},
		{`"plain"`, "plain", true},
		{`"café ☕ 日本語 🎉"`, "café ☕ 日本語 🎉", true},
		{`"a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t", true},
		{`"\u0041\u00e9\u20AC\u0000"`, "Aé€\x00", true},
		{`"\ud83d\ude00 x"`, "😀 x", true},
		{`"x\uD83D\uDE00"`, "x😀", true},
		// Given up: encoding/json would substitute U+FFFD or reject.
		{`"\ud800"`, "", false},
		{`"\ud800x"`, "", false},
		{`"\ud83d\u0041"`, "", false},
		{`"\ude00"`, "", false},
		{"\"bad \xff\"", "", false},
		{"\"cut \xe2\x82\"", "", false},
		{"\"ctl \x01\"", "", false},
		{"\"tab \t\"", "", false},
		{`"\q"`, "", false},
		{`"\u12"`, "", false},
		{`"\u12G4"`, "", false},
		{`"unterminated`, "", false},
		{`"ends in backslash\"`, "", false},
		{`"\`, "", false},
		{`x`, "", false},
		{``, "", false},
	} {
		l := lex(c.in)
		got, ok := l.String(nil)
		if ok != c.ok || string(got) != c.want {
			t.Errorf("String(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
		if ok && l.Pos != len(c.in) {
			t.Errorf("String(%q) stopped at %d of %d", c.in, l.Pos, len(c.in))
		}
	}
}

// TestStringEveryOffset moves each special byte through the eight-byte words of
// the fast loop and across their boundaries.
func TestStringEveryOffset(t *testing.T) {
	for n := 0; n < 40; n++ {
		pad := strings.Repeat("a", n)
		for _, c := range []struct {
			mid  string
			want string
			ok   bool
		}{
			{``, pad + pad, true},
			{`\n`, pad + "\n" + pad, true},
			{`\u00e9`, pad + "é" + pad, true},
			{"é", pad + "é" + pad, true},
			{`\"`, pad + `"` + pad, true},
			{"\x1f", "", false},
			{"\x80", "", false},
		} {
			in := `"` + pad + c.mid + pad + `",`
			l := lex(in)
			got, ok := l.String(make([]byte, 0, 4))
			if ok != c.ok || (ok && (string(got) != c.want || l.Pos != len(in)-1)) {
				t.Fatalf("String(%q) = %q, %v at %d; want %q, %v", in, got, ok, l.Pos, c.want, c.ok)
			}
		}
	}
}

// TestStringAliasesWithoutEscapes: a string without escapes is a sub-slice of the
// input; one with escapes is decoded into the caller's scratch.
func TestStringAliasesWithoutEscapes(t *testing.T) {
	in := []byte(`"abc" "a\nb"`)
	l := &Lexer{Data: in}
	v, ok := l.String(nil)
	if !ok || &v[0] != &in[1] {
		t.Fatalf("no-escape string not aliased: %q %v", v, ok)
	}
	scratch := make([]byte, 0, 16)
	l.WS()
	v, ok = l.String(scratch)
	if !ok || string(v) != "a\nb" || &v[:1][0] != &scratch[:1][0] {
		t.Fatalf("escaped string not decoded into scratch: %q %v", v, ok)
	}
}

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		in   string
		text string
		ok   bool
	}{
		{`0`, `0`, true},
		{`-0`, `-0`, true},
		{`12345,`, `12345`, true},
		{`-2.5e3]`, `-2.5e3`, true},
		{`1E+2`, `1E+2`, true},
		{`1e-0`, `1e-0`, true},
		{`0.000`, `0.000`, true},
		{`01`, `0`, true}, // the number is 0; the caller sees the 1 that follows
		{`1e999`, `1e999`, true},
		{`-`, ``, false},
		{`+1`, ``, false},
		{`.5`, ``, false},
		{`1.`, ``, false},
		{`1.e3`, ``, false},
		{`1e`, ``, false},
		{`1e+`, ``, false},
		{`x`, ``, false},
		{``, ``, false},
	} {
		l := lex(c.in)
		text, ok := l.Number()
		if ok != c.ok || string(text) != c.text {
			t.Errorf("Number(%q) = %q, %v; want %q, %v", c.in, text, ok, c.text, c.ok)
		}
	}
}

func TestLiterals(t *testing.T) {
	if l := lex(`true`); !l.Literal("true") || l.Pos != 4 {
		t.Fatal("true")
	}
	if l := lex(`tru`); l.Literal("true") || l.Pos != 0 {
		t.Fatal("a cut literal must not pass")
	}
	if v, ok := lex(`false`).Bool(); v || !ok {
		t.Fatal("false")
	}
	if v, ok := lex(`true`).Bool(); !v || !ok {
		t.Fatal("true")
	}
	if _, ok := lex(`null`).Bool(); ok {
		t.Fatal("null is not a bool")
	}
	if !lex(`null`).Null() || lex(`nul`).Null() || lex(`"null"`).Null() {
		t.Fatal("Null")
	}
	if l := lex(" \t\r\n{"); l.End() || l.Peek() != '{' || !l.Consume('{') || !l.End() || l.Peek() != 0 {
		t.Fatal("WS/Peek/Consume/End")
	}
}

func TestSkip(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{`{}`, true},
		{` { "a" : [ 1 , -2.5e3 , true , false , null , { "b" : "\u00e9\n" } ] } `, true},
		{`[[[]]]`, true},
		{`"lone \ud800 stays"`, true}, // syntax only, as encoding/json for a discarded value
		{"\"bad \xff utf8\"", true},   // likewise
		{`{"a":1,}`, false},
		{`[1,]`, false},
		{`{"a" 1}`, false},
		{`{1:1}`, false},
		{`"\q"`, false},
		{`"\u12"`, false},
		{"\"ctl \x01\"", false},
		{`nul`, false},
		{`01`, false}, // Skip passes 0; End sees the 1
		{`[`, false},
		{``, false},
	} {
		l := lex(c.in)
		ok := l.Skip(8) && l.End()
		if ok != c.ok {
			t.Errorf("Skip(%q) = %v, want %v", c.in, ok, c.ok)
		}
		if ok != json.Valid([]byte(c.in)) {
			t.Errorf("Skip(%q) = %v, json.Valid differs", c.in, ok)
		}
	}
}

func TestSkipDepth(t *testing.T) {
	for _, depth := range []int{0, 1, 5} {
		in := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		if l := lex(in); depth > 0 && !l.Skip(depth) {
			t.Errorf("depth %d within a budget of %d refused", depth, depth)
		}
		if l := lex(`[` + in + `]`); l.Skip(depth) {
			t.Errorf("depth %d over a budget of %d accepted", depth+1, depth)
		}
	}
	if l := lex(`{"a":{"b":{}}}`); l.Skip(2) || !lex(`{"a":{"b":{}}}`).Skip(3) {
		t.Error("objects count towards the depth")
	}
}
