package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func mustWorkload(t *testing.T, name string) WorkloadConfig {
	t.Helper()
	c, err := DefaultWorkload(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func decodeChat(t *testing.T, b []byte) chatRequest {
	t.Helper()
	var c chatRequest
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("body is not a chat request: %v", err)
	}
	return c
}

func TestGenerateDeterministic(t *testing.T) {
	for _, name := range Workloads {
		t.Run(name, func(t *testing.T) {
			c := mustWorkload(t, name)
			c.Requests, c.DocTokens = 60, 300
			a, err := Generate(c, NewText())
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Generate(c, NewText())
			if len(a.Requests) != 60 || len(b.Requests) != 60 {
				t.Fatalf("requests: %d and %d, want 60", len(a.Requests), len(b.Requests))
			}
			for i := range a.Requests {
				ra, rb := a.Requests[i], b.Requests[i]
				if !bytes.Equal(ra.Body, rb.Body) || ra.At != rb.At || ra.Chain != rb.Chain || ra.Turn != rb.Turn {
					t.Fatalf("request %d differs between two generations with one seed", i)
				}
				if ra.ID != i {
					t.Fatalf("request %d has ID %d", i, ra.ID)
				}
				if i > 0 && ra.At < a.Requests[i-1].At {
					t.Fatalf("request %d arrives before request %d", i, i-1)
				}
				cr := decodeChat(t, ra.Body)
				if !cr.Stream || !cr.StreamOptions.IncludeUsage || cr.Model != DefaultModel || cr.MaxTokens < 1 {
					t.Fatalf("request %d: want a streaming chat with usage and max_tokens, got %+v", i, cr)
				}
			}
			c.Seed = 2
			d, _ := Generate(c, NewText())
			same := 0
			for i := range a.Requests {
				if bytes.Equal(a.Requests[i].Body, d.Requests[i].Body) {
					same++
				}
			}
			if same == len(a.Requests) {
				t.Fatal("another seed gave the same trace")
			}
		})
	}
}

func TestSharedPrefixShape(t *testing.T) {
	c := mustWorkload(t, WorkloadSharedPrefix)
	c.Requests, c.Documents, c.DocTokens, c.QuestionTokens = 300, 8, 400, 50
	tr, err := Generate(c, NewText())
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	questions := map[string]bool{}
	count := map[string]int{}
	for _, r := range tr.Requests {
		cr := decodeChat(t, r.Body)
		if len(cr.Messages) != 2 || cr.Messages[0].Role != "system" || cr.Messages[1].Role != "user" {
			t.Fatalf("request %d: want [system doc, user question], got %d messages", r.ID, len(cr.Messages))
		}
		if prev, ok := docs[r.Prefix]; ok && prev != cr.Messages[0].Content {
			t.Fatalf("prefix %s has two different documents", r.Prefix)
		}
		docs[r.Prefix] = cr.Messages[0].Content
		if questions[cr.Messages[1].Content] {
			t.Fatalf("request %d repeats a question", r.ID)
		}
		questions[cr.Messages[1].Content] = true
		count[r.Prefix]++
		if words := len(strings.Fields(cr.Messages[0].Content)); words < 400 || words > 420 {
			t.Fatalf("document of %d words, want about 400 at 1 token per word", words)
		}
	}
	if len(docs) < 4 || len(docs) > 8 {
		t.Fatalf("%d distinct documents used, want 4..8", len(docs))
	}
	// Zipf: the most popular document carries more than a uniform share.
	if count["doc-0"] <= 300/8 {
		t.Fatalf("doc-0 has %d requests, want more than the uniform %d (Zipf)", count["doc-0"], 300/8)
	}
	if tr.Engines != 7 || len(tr.Joins) != 0 {
		t.Fatalf("engines %d joins %v, want 7 and none", tr.Engines, tr.Joins)
	}
}

func TestHotPrefixHalf(t *testing.T) {
	c := mustWorkload(t, WorkloadHotPrefix)
	c.Requests, c.DocTokens = 2000, 20
	tr, err := Generate(c, NewText())
	if err != nil {
		t.Fatal(err)
	}
	hot := 0
	for _, r := range tr.Requests {
		if r.Prefix == "doc-0" {
			hot++
		}
	}
	if frac := float64(hot) / 2000; frac < 0.45 || frac > 0.55 {
		t.Fatalf("hot prefix carries %.3f of the traffic, want ≈ 0.5", frac)
	}
}

func TestScaleOutJoins(t *testing.T) {
	c := mustWorkload(t, WorkloadScaleOut)
	c.Requests, c.DocTokens = 90, 50
	tr, err := Generate(c, NewText())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Engines != 4 || len(tr.Joins) != 1 || tr.Joins[0].Engines != 3 || tr.Joins[0].AfterRequests != 45 || tr.MaxEngines() != 7 {
		t.Fatalf("scale-out: engines %d joins %+v, want 4 then +3 after 45 requests", tr.Engines, tr.Joins)
	}
}

func TestMultiturnResendsConversation(t *testing.T) {
	c := mustWorkload(t, WorkloadMultiturn)
	c.Requests = 200
	tr, err := Generate(c, NewText())
	if err != nil {
		t.Fatal(err)
	}
	chains := tr.Chains()
	total, multi := 0, 0
	for _, ch := range chains {
		total += len(ch)
		if len(ch) > c.MaxTurns {
			t.Fatalf("session of %d turns, max %d", len(ch), c.MaxTurns)
		}
		if len(ch) > 1 {
			multi++
		}
		var prev []Message
		for k, id := range ch {
			r := tr.Requests[id]
			if r.Turn != k {
				t.Fatalf("chain turn order: request %d has turn %d at position %d", id, r.Turn, k)
			}
			cr := decodeChat(t, r.Body)
			if len(cr.Messages) != 2*k+1 {
				t.Fatalf("turn %d has %d messages, want %d", k, len(cr.Messages), 2*k+1)
			}
			for j := range prev {
				if cr.Messages[j] != prev[j] {
					t.Fatalf("turn %d does not resend message %d of the conversation", k, j)
				}
			}
			if k > 0 && cr.Messages[len(prev)].Role != "assistant" {
				t.Fatalf("turn %d: the previous answer is missing", k)
			}
			prev = cr.Messages
		}
	}
	if total != 200 || multi == 0 {
		t.Fatalf("%d requests in chains (%d multi-turn sessions), want 200 and some sessions of > 1 turn", total, multi)
	}
}

func TestWorkloadValidate(t *testing.T) {
	if _, err := DefaultWorkload("nope"); !errors.Is(err, ErrWorkload) {
		t.Fatalf("unknown workload: %v, want ErrWorkload", err)
	}
	for name, mut := range map[string]func(*WorkloadConfig){
		"requests":   func(c *WorkloadConfig) { c.Requests = 0 },
		"qps":        func(c *WorkloadConfig) { c.QPS = -1 },
		"zipf":       func(c *WorkloadConfig) { c.ZipfS = 1 },
		"documents":  func(c *WorkloadConfig) { c.Documents = 0 },
		"engines":    func(c *WorkloadConfig) { c.Engines = 0 },
		"doc tokens": func(c *WorkloadConfig) { c.DocTokens = 0 },
	} {
		c := mustWorkload(t, WorkloadSharedPrefix)
		mut(&c)
		if _, err := Generate(c, nil); !errors.Is(err, ErrWorkload) {
			t.Errorf("%s: %v, want ErrWorkload", name, err)
		}
	}
}

func TestReadTrace(t *testing.T) {
	in := `# a comment
{"timestamp": 10.5, "session": "a", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
{"timestamp": 10.0, "body": {"model": "m", "prompt": "once upon", "max_tokens": 3}}

{"timestamp": 12, "session": "a", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}]}}
`
	tr, err := ReadTrace(strings.NewReader(in), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 3 || tr.Model != "m" || tr.Engines != 3 {
		t.Fatalf("got %d requests, model %q, engines %d", len(tr.Requests), tr.Model, tr.Engines)
	}
	r0, r1, r2 := tr.Requests[0], tr.Requests[1], tr.Requests[2]
	if r0.Path != PathCompletion || r0.At != 0 || r1.Path != PathChat || r1.At.Seconds() != 0.5 || r2.At.Seconds() != 2 {
		t.Fatalf("order/paths/times wrong: %+v %+v %+v", r0.At, r1.At, r2.At)
	}
	if r1.Chain != r2.Chain || r1.Turn != 0 || r2.Turn != 1 || r0.Chain == r1.Chain {
		t.Fatalf("session chaining wrong: chains %d %d %d turns %d %d", r0.Chain, r1.Chain, r2.Chain, r1.Turn, r2.Turn)
	}
	var body map[string]any
	if err := json.Unmarshal(r0.Body, &body); err != nil || body["stream"] != true || body["max_tokens"] != 3.0 {
		t.Fatalf("replayed body must stream and keep its fields: %s", r0.Body)
	}

	for name, bad := range map[string]string{
		"not json":     "{nope\n",
		"no timestamp": `{"body": {"model": "m", "prompt": "x"}}`,
		"no model":     `{"timestamp": 1, "body": {"prompt": "x"}}`,
		"no prompt":    `{"timestamp": 1, "body": {"model": "m"}}`,
		"body string":  `{"timestamp": 1, "body": "x"}`,
		"empty":        "\n# only a comment\n",
	} {
		_, err := ReadTrace(strings.NewReader(bad), 1)
		if !errors.Is(err, ErrTrace) {
			t.Errorf("%s: %v, want ErrTrace", name, err)
		}
		if name != "empty" && !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: error %q does not name the line", name, err)
		}
	}
}
