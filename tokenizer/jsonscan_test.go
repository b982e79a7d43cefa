package tokenizer

import (
	"os"
	"strings"
	"testing"
)

// scanDoc is a small byte-level BPE tokenizer.json; %VOCAB% and %MERGES% and
// %MODEL% (extra model members) are replaced by the cases.
const scanDoc = `{"version":"1.0","truncation":null,"padding":null,
 "added_tokens":[{"id":9,"content":"<|end|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":{"type":"NFC"},
 "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
 "post_processor":null,
 "decoder":{"type":"ByteLevel"},
 "model":{"type":"BPE","dropout":null,"unk_token":null%MODEL%,
  "vocab":%VOCAB%,
  "merges":%MERGES%}}`

const (
	scanVocabOK  = `{"a":0,"b":1,"ab":2,"Ġ":3,"Ġa":4,"€":5,"€a":6,"c":7}`
	scanMergesOK = `["a b","Ġ a","€ a"]`
)

func scanCase(vocab, merges, model string) string {
	r := strings.NewReplacer("%VOCAB%", vocab, "%MERGES%", merges, "%MODEL%", model)
	return r.Replace(scanDoc)
}

// checkScanAgainstGeneric requires the loader (scanner, or its fallback) to give
// what encoding/json alone gives: the same error text, or equal tokenizers. It
// returns whether the scanner took the document.
func checkScanAgainstGeneric(t testing.TB, doc string) (scanned bool) {
	t.Helper()
	_, _, scanned = scanTokenizerJSON([]byte(doc))
	got, gotErr := parseCore([]byte(doc), nil)
	want, wantErr := parseCoreGeneric([]byte(doc), nil)
	switch {
	case (gotErr == nil) != (wantErr == nil):
		t.Fatalf("loader error %v, encoding/json error %v\n%s", gotErr, wantErr, doc)
	case gotErr != nil:
		// A duplicated id names its two texts in the order met: document order
		// for the scanner, map order for encoding/json.
		if gotErr.Error() != wantErr.Error() && !strings.Contains(gotErr.Error(), "is given to both") {
			t.Fatalf("loader error %q, encoding/json error %q\n%s", gotErr, wantErr, doc)
		}
	default:
		if d := coreDiff(got, want); len(d) > 0 {
			t.Fatalf("loader and encoding/json differ in %v\n%s", d, doc)
		}
	}
	return scanned
}

func TestScannerMatchesEncodingJSON(t *testing.T) {
	const v, m = scanVocabOK, scanMergesOK
	for _, c := range []struct {
		name    string
		doc     string
		scanned bool // the fast scanner takes it (else encoding/json decides)
	}{
		{"flat merges", scanCase(v, m, ""), true},
		{"pair merges", scanCase(v, `[["a","b"],["Ġ","a"],["€","a"]]`, ""), true},
		{"no merges", scanCase(v, `[]`, ""), true},
		{"merges before vocab", strings.Replace(scanCase(v, m, ""), `"vocab":`+v+`,`+"\n  "+`"merges":`+m,
			`"merges":`+m+`,"vocab":`+v, 1), true},
		{"escapes", scanCase(`{"\u0061":0,"b":1,"a\u0062":2,"\u0120":3,"\u0120a":4,"\u20ac":5,"\u20aca":6,"\/":7,"\"\\\b\f\n\r\t":8}`, m, ""), true},
		{"escaped merges", scanCase(v, `["\u0061 b","\u0120 a","€ \u0061"]`, ""), true},
		{"surrogate pair", scanCase(`{"a":0,"b":1,"ab":2,"Ġ":3,"Ġa":4,"€":5,"€a":6,"\ud83d\ude00":7}`, m, ""), true},
		{"NUL escape", scanCase(`{"a":0,"b":1,"ab":2,"Ġ":3,"Ġa":4,"€":5,"€a":6,"\u0000":7}`, m, ""), true},
		{"whitespace everywhere", strings.NewReplacer(":", " \t:\r\n ", ",", "\n,\t").Replace(scanCase(v, m, "")), true},
		{"duplicate text keeps the last id", scanCase(`{"a":0,"b":1,"ab":2,"Ġ":3,"Ġa":4,"€":5,"€a":6,"c":7,"a":8}`, m, ""), true},
		{"duplicate text token", scanCase(`{"a":0,"b":1,"ab":2,"Ġ":3,"Ġa":4,"€":5,"€a":6,"€":7}`, m, ""), true},
		{"duplicate id", scanCase(`{"a":0,"b":1,"ab":2,"Ġ":3,"Ġa":4,"€":5,"€a":6,"c":1}`, m, ""), true},
		{"ids out of order with gaps", scanCase(`{"c":70,"a":0,"€a":60,"b":1,"Ġa":4,"ab":2,"Ġ":30,"€":5}`, m, ""), true},
		{"ignore_merges", scanCase(v, m, `,"ignore_merges":true`), true},
		{"nested unknown member", scanCase(v, m, `,"extra":{"x":[1,-2.5e3,true,false,null,{"y":"\u00e9"}]}`), true},
		{"merge token missing", scanCase(v, `["a b","b c"]`, ""), true},
		{"merged token missing", scanCase(v, `["b a"]`, ""), true},
		{"unsupported option", scanCase(v, m, `,"byte_fallback":true`), true},
		{"bad option type", scanCase(v, m, `,"dropout":"x"`), true},

		{"lone high surrogate", scanCase(`{"a":0,"b":1,"ab":2,"\ud83d":3}`, `["a b"]`, ""), false},
		{"lone low surrogate", scanCase(`{"a":0,"b":1,"ab":2,"\ude00x":3}`, `["a b"]`, ""), false},
		{"invalid UTF-8 key", scanCase("{\"a\":0,\"b\":1,\"ab\":2,\"\xff\":3}", `["a b"]`, ""), false},
		{"Vocab spelled with capitals", strings.Replace(scanCase(v, m, ""), `"vocab"`, `"Vocab"`, 1), false},
		{"merges with long s", strings.Replace(scanCase(v, m, ""), `"merges"`, `"mergeſ"`, 1), false},
		{"Model spelled with capitals", strings.Replace(scanCase(v, m, ""), `"model"`, `"Model"`, 1), false},
		{"model twice", strings.Replace(scanCase(v, m, ""), `"decoder"`, `"model":null,"decoder"`, 1), false},
		{"vocab twice", scanCase(v, m, `,"vocab":{}`), false},
		{"fractional id", scanCase(`{"a":0,"b":1.0,"ab":2}`, `["a b"]`, ""), false},
		{"exponent id", scanCase(`{"a":0,"b":1e0,"ab":2}`, `["a b"]`, ""), false},
		{"negative id", scanCase(`{"a":0,"b":-1,"ab":2}`, `["a b"]`, ""), false},
		{"id over uint32", scanCase(`{"a":0,"b":4294967296,"ab":2}`, `["a b"]`, ""), false},
		{"leading zero id", scanCase(`{"a":0,"b":01,"ab":2}`, `["a b"]`, ""), false},
		{"string id", scanCase(`{"a":0,"b":"1","ab":2}`, `["a b"]`, ""), false},
		{"null id", scanCase(`{"a":0,"b":null,"ab":2}`, `["a b"]`, ""), false},
		{"merge without space", scanCase(v, `["ab"]`, ""), false},
		{"mixed merge forms", scanCase(v, `["a b",["Ġ","a"]]`, ""), false},
		{"merge with three parts", scanCase(v, `[["a","b","c"]]`, ""), false},
		{"merge pair with a number", scanCase(v, `[["a",1]]`, ""), false},
		{"null merges", scanCase(v, `null`, ""), false},
		{"null vocab", scanCase(`null`, `[]`, ""), false},
		{"vocab as a list (Unigram)", strings.Replace(scanCase(`[["a",0.0]]`, `[]`, ""), `"type":"BPE"`, `"type":"Unigram"`, 1), false},
		{"no vocab", strings.Replace(scanCase(v, m, ""), `"vocab":`+v+`,`, ``, 1), false},
		{"unknown escape", scanCase(`{"a":0,"\x":1}`, `[]`, ""), false},
		{"raw control byte", scanCase("{\"a\":0,\"\t\":1}", `[]`, ""), false},
		{"trailing comma in vocab", scanCase(`{"a":0,"b":1,}`, `[]`, ""), false},
		{"trailing data", scanCase(v, m, "") + ` x`, false},
		{"two documents", scanCase(v, m, "") + `{}`, false},
		{"syntax error elsewhere", strings.Replace(scanCase(v, m, ""), `{"type":"NFC"}`, `{"type":"NFC",}`, 1), false},
		{"bad literal elsewhere", strings.Replace(scanCase(v, m, ""), `"post_processor":null`, `"post_processor":nul`, 1), false},
		{"model not an object", `{"model":"BPE"}`, false},
		{"empty", ``, false},
		{"BOM", "\ufeff" + scanCase(v, m, ""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := checkScanAgainstGeneric(t, c.doc); got != c.scanned {
				t.Fatalf("scanner took it: %v, want %v", got, c.scanned)
			}
		})
	}
}

// FuzzScannerMatchesEncodingJSON: go test ./tokenizer -run '^$' -fuzz FuzzScannerMatchesEncodingJSON
func FuzzScannerMatchesEncodingJSON(f *testing.F) {
	f.Add(scanCase(scanVocabOK, scanMergesOK, ""))
	f.Add(scanCase(scanVocabOK, `[["a","b"],["Ġ","a"]]`, `,"ignore_merges":true`))
	f.Add(scanCase(`{"\u0061":0,"b":1,"a\u0062":2,"\ud83d\ude00":3}`, `["\u0061 b"]`, ""))
	f.Add(scanCase(`{"c":7,"a":0,"b":1,"ab":2,"a":3}`, `["a b"]`, ""))
	f.Fuzz(func(t *testing.T, doc string) {
		if len(doc) > 4096 {
			return
		}
		checkScanAgainstGeneric(t, doc)
	})
}

// TestSparseVocabRefused: ids far beyond the token count would size the id-indexed
// layout by the id; they are refused with a clear error on both paths.
func TestSparseVocabRefused(t *testing.T) {
	doc := scanCase(`{"a":0,"b":1,"ab":4000000000}`, `["a b"]`, "")
	if !checkScanAgainstGeneric(t, doc) {
		t.Fatal("the scanner must take it")
	}
	if _, err := parseCore([]byte(doc), nil); err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("got %v", err)
	}
}

// BenchmarkScanTokenizerJSON: the fast scanner alone on the embedded Qwen3
// tokenizer.json (gunzipped once, outside the loop): vocab and merges read into the
// flat arrays, the skeleton cut out.
func BenchmarkScanTokenizerJSON(b *testing.B) {
	gz, err := os.ReadFile(qwen3JSONPath)
	if err != nil {
		b.Fatal(err)
	}
	data, err := gunzip(gz)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := scanTokenizerJSON(data); !ok {
			b.Fatal("the scanner gave up on the embedded tokenizer.json")
		}
	}
}
