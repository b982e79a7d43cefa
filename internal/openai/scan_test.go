package openai

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/tokenizer"
)

// slowWire decodes body the reference way: encoding/json, then the same key order
// for tools and tool_calls as the scanner keeps.
func slowWire(body []byte) (*wire, error) {
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, err
	}
	orderTools(body, &w)
	return &w, nil
}

// checkScan requires that the scanner either gives up or decodes exactly what
// encoding/json decodes; it returns whether the scanner accepted the body.
func checkScan(t *testing.T, body []byte) bool {
	t.Helper()
	var fast wire
	if !scanWire(body, &fast) {
		return false
	}
	slow, err := slowWire(body)
	if err != nil {
		t.Fatalf("scanner accepted a body encoding/json rejects (%v): %q", err, body)
	}
	if !reflect.DeepEqual(&fast, slow) {
		t.Fatalf("scanner and encoding/json differ on %q:\nfast %#v\nslow %#v", body, fast, *slow)
	}
	return true
}

var scanCases = []struct {
	body   string
	accept bool // the fast path must take it (else it may fall back)
}{
	{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, true},
	{` {"model" : "m" ,"messages" : [ {"role":"user" , "content" : "a\"b\\c\/d\b\f\n\r\t\u0041\u00e9\u20ac\u0000"} ] } `, true},
	{`{"model":"m","messages":[{"role":"system","content":"café ☕ 日本語 🎉"},{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}]}`, true},
	{`{"model":"m","messages":[null,{"role":"user","content":null,"name":"n","extra":{"a":[1,2.5,-3e2,true,false,null]}}]}`, true},
	{`{"model":"m","stream":true,"stream_options":{"include_usage":true,"other":1},"max_tokens":12,"max_completion_tokens":7,"cache_salt":"s","prompt_cache_key":"g","messages":[]}`, true},
	{`{"model":null,"stream":null,"stream_options":null,"max_tokens":null,"messages":null,"tools":null,"add_generation_prompt":null,"continue_final_message":null,"chat_template_kwargs":null,"add_special_tokens":null,"prompt":null}`, true},
	{`{"model":"m","add_generation_prompt":false,"continue_final_message":true,"add_special_tokens":true,"chat_template_kwargs":{"enable_thinking":false,"n":{"b":1,"a":2}},"messages":[{"role":"user","content":"x"}]}`, true},
	{`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}},"required":["z"]}}}],"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"z":"1","a":2}}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`, true},
	{`{"model":"m","prompt":"text"}`, true},
	{`{"model":"m","prompt":[[1,2],[3]],"unknown":{"deep":[[[{}]]]},"temperature":0.7,"stop":["\n"]}`, true},
	{`{}`, true},
	// The fast path may give up on these; whatever it does must agree.
	{`{"Model":"m","messages":[]}`, false},
	{`{"model":"a","model":"b"}`, false},
	{`{"ſtream":true,"model":"m"}`, false},
	{`{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00 \ud800"}]}`, false},
	{"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff utf8\"}]}", false},
	{"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"ctl \x01\"}]}", false},
	{`{"model":"m","max_tokens":1e999}`, false},
	{`{"model":"m","max_tokens":01}`, false},
	{`{"model":"m","stream":"yes"}`, false},
	{`{"model":"m","messages":[5]}`, false},
	{`{"model":"m","messages":[{"role":"user","content":"x"}]} trailing`, false},
	{`{"model":"m",}`, false},
	{`{"model":"m","x":"\q"}`, false},
	{`{"model":"m","stream_options":{"Include_Usage":true}}`, false},
	{`{"model":"m","messages":[{"role":"user","content":"x"}`, false},
}

func TestScanMatchesEncodingJSON(t *testing.T) {
	for _, c := range scanCases {
		if got := checkScan(t, []byte(c.body)); c.accept && !got {
			t.Errorf("fast path gave up on %q", c.body)
		}
	}
}

// TestParseChatFallbackKeepsToolOrder: a body only encoding/json can read (a
// case-folded field name) still gets tools and tool_calls in document order.
func TestParseChatFallbackKeepsToolOrder(t *testing.T) {
	body := `{"MODEL":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}}],"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"z":"1","a":2}},"type":"function"}]}]}`
	var w wire
	if scanWire([]byte(body), &w) {
		t.Fatal("the scanner must leave case-folded field names to encoding/json")
	}
	r, err := ParseChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	tool := r.Tools[0].(*tokenizer.Object)
	params := tool.Values["function"].(*tokenizer.Object).Values["parameters"].(*tokenizer.Object)
	if !reflect.DeepEqual(tool.Keys, []string{"type", "function"}) || !reflect.DeepEqual(params.Keys, []string{"z", "a"}) {
		t.Fatalf("tool keys %v, parameters keys %v", tool.Keys, params.Keys)
	}
	call := r.Messages[0]["tool_calls"].([]any)[0].(*tokenizer.Object)
	if !reflect.DeepEqual(call.Keys, []string{"function", "type"}) {
		t.Fatalf("tool call keys %v", call.Keys)
	}
	if a := params.Values["a"]; a != float64(2) {
		t.Fatalf("numbers must stay float64 like encoding/json's, got %T %v", a, a)
	}
}

func FuzzScanMatchesEncodingJSON(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScan(t, body)
		// ParseChat never fails with anything but a 400 *Error.
		if _, err := ParseChat(body); err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("ParseChat error is not a 400 *Error: %v", err)
			}
		}
	})
}

// TestParseChatGoldenPrompts: request bodies built from the tokenizer's golden chat
// cases (messages and tools as the reference saw them, key order included) go
// through ParseChat and Tokenize to the reference's prompt and ids.
func TestParseChatGoldenPrompts(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join("..", "..", "tokenizer", "testdata", "golden", "qwen3.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n, withTools := 0, 0
	for sc.Scan() {
		var c struct {
			Kind                string          `json:"kind"`
			Name                string          `json:"name"`
			Messages            json.RawMessage `json:"messages"`
			Tools               json.RawMessage `json:"tools"`
			Kwargs              json.RawMessage `json:"kwargs"`
			AddGenerationPrompt bool            `json:"add_generation_prompt"`
			Prompt              string          `json:"prompt"`
			IDs                 []uint32        `json:"ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if c.Kind != "chat" {
			continue
		}
		var b strings.Builder
		b.WriteString(`{"model":"Qwen/Qwen3-0.6B","messages":`)
		b.Write(c.Messages)
		if len(c.Tools) > 0 && string(c.Tools) != "null" {
			b.WriteString(`,"tools":`)
			b.Write(c.Tools)
			withTools++
		}
		if len(c.Kwargs) > 0 && string(c.Kwargs) != "null" {
			b.WriteString(`,"chat_template_kwargs":`)
			b.Write(c.Kwargs)
		}
		ag, _ := json.Marshal(c.AddGenerationPrompt)
		b.WriteString(`,"add_generation_prompt":` + string(ag) + `}`)
		body := []byte(b.String())
		var w wire
		if !scanWire(body, &w) {
			t.Errorf("%s: the fast path gave up on a golden body", c.Name)
		}
		r, err := ParseChat(body)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		res, err := r.Tokenize(context.Background(), tok)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if res.Prompt != c.Prompt || !reflect.DeepEqual(res.IDs, c.IDs) {
			t.Errorf("%s: prompt/ids differ from the reference:\n got %q\nwant %q", c.Name, res.Prompt, c.Prompt)
		}
		n++
	}
	if n < 100 || withTools == 0 {
		t.Fatalf("only %d golden chat cases (%d with tools)", n, withTools)
	}
	t.Logf("%d golden chat bodies (%d with tools) parsed and tokenized exactly", n, withTools)
}
