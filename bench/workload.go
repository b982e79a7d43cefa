package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"
)

// Workload names accepted by --workload.
const (
	WorkloadSharedPrefix = "shared-prefix"
	WorkloadMultiturn    = "multiturn"
	WorkloadScaleOut     = "scale-out"
	WorkloadHotPrefix    = "hot-prefix"
	WorkloadTrace        = "trace"
)

// Workloads lists the generated workloads in report order (trace needs a file).
var Workloads = []string{WorkloadSharedPrefix, WorkloadMultiturn, WorkloadScaleOut, WorkloadHotPrefix}

// Request paths the benchmark sends to the router.
const (
	PathChat       = "/v1/chat/completions"
	PathCompletion = "/v1/completions"
)

// ErrWorkload is returned for an unknown workload or bad workload parameters.
var ErrWorkload = errors.New("bench: bad workload")

// ErrTrace is returned for a trace file that cannot be replayed; the error names the line.
var ErrTrace = errors.New("bench: bad trace")

// Message is one chat message of a generated request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one request of a trace.
type Request struct {
	// ID is the request's index in Trace.Requests.
	ID int
	// At is the planned arrival in simulated time since the start of the run (open loop).
	At time.Duration
	// Chain groups requests that run in order (a session's turns); Turn is the position in
	// it, from 0. A request of turn > 0 is sent only after the previous turn completed.
	Chain, Turn int
	// Think is the simulated pause between the previous turn's completion and this one (open loop).
	Think time.Duration
	// Prefix names the shared prefix (document) the request carries; "" if none.
	Prefix string
	// Path is PathChat or PathCompletion.
	Path string
	// Body is the OpenAI request body, streaming with usage in the last chunk.
	Body []byte
}

// Join adds engines during a run: when AfterRequests requests have been dispatched,
// Engines more engines (with their agents) start and join the fleet.
type Join struct {
	AfterRequests int
	Engines       int
}

// Trace is a complete, replayable workload: the same Trace is run for every policy.
type Trace struct {
	Workload string
	Model    string
	// Requests sorted by At; the turns of a chain appear in order.
	Requests []Request
	// Engines is the fleet size at the start; Joins add more during the run.
	Engines int
	Joins   []Join
}

// Chains returns the request indices of every chain, turns in order, chains ordered by
// their first request's arrival.
func (t *Trace) Chains() [][]int {
	byChain := map[int][]int{}
	var order []int
	for i, r := range t.Requests {
		if _, ok := byChain[r.Chain]; !ok {
			order = append(order, r.Chain)
		}
		byChain[r.Chain] = append(byChain[r.Chain], i)
	}
	out := make([][]int, 0, len(order))
	for _, c := range order {
		ids := byChain[c]
		sort.SliceStable(ids, func(a, b int) bool { return t.Requests[ids[a]].Turn < t.Requests[ids[b]].Turn })
		out = append(out, ids)
	}
	return out
}

// MaxEngines is the fleet size after every join.
func (t *Trace) MaxEngines() int {
	n := t.Engines
	for _, j := range t.Joins {
		n += j.Engines
	}
	return n
}

// WorkloadConfig parameterizes the generated workloads. Token counts are targets met
// through the calibrated tokens-per-word ratio of the Text generator.
type WorkloadConfig struct {
	Name  string
	Seed  uint64
	Model string
	// Requests is the number of requests generated (multiturn: sessions are added until reached).
	Requests int
	// QPS is the simulated arrival rate of the planned arrivals (requests, or for multiturn
	// turns, per simulated second); 0 puts every arrival at 0.
	QPS float64
	// Engines is the fleet size at the start.
	Engines int

	// Documents is G, the number of shared prefixes (shared-prefix, hot-prefix, scale-out).
	Documents int
	// DocTokens is the length of each shared prefix; QuestionTokens of each unique question.
	DocTokens, QuestionTokens int
	// ZipfS is the Zipf exponent of document popularity (> 1).
	ZipfS float64
	// HotFraction is the share of traffic on the one hot prefix (hot-prefix).
	HotFraction float64
	// OutputTokens is max_tokens for the document workloads.
	OutputTokens int

	// MaxTurns bounds a multiturn session (1..MaxTurns turns, uniform).
	MaxTurns int
	// UserTokensMedian and AssistantTokensMedian are the medians of the log-normal message
	// lengths, LengthSigma their sigma; lengths are clamped to [4, 8×median].
	UserTokensMedian, AssistantTokensMedian int
	LengthSigma                             float64
	// ThinkMean is the mean simulated pause between turns (exponential), open loop only.
	ThinkMean time.Duration

	// JoinEngines engines join after JoinAtFraction of the requests were dispatched (scale-out).
	JoinEngines    int
	JoinAtFraction float64
}

// DefaultModel is the model every generated request names: the simulator's default.
const DefaultModel = "Qwen/Qwen3-0.6B"

// DefaultWorkload returns the default parameters of a generated workload.
func DefaultWorkload(name string) (WorkloadConfig, error) {
	c := WorkloadConfig{
		Name: name, Seed: 1, Model: DefaultModel, Requests: 400, QPS: 4, Engines: 7,
		Documents: 16, DocTokens: 8000, QuestionTokens: 200, ZipfS: 1.1, OutputTokens: 64,
	}
	switch name {
	case WorkloadSharedPrefix:
	case WorkloadHotPrefix:
		c.HotFraction = 0.5
	case WorkloadScaleOut:
		// Mid-run: the fleet has seen its documents by then, so the dip is the join's, not the cold start's.
		c.Engines, c.JoinEngines, c.JoinAtFraction = 4, 3, 0.5
	case WorkloadMultiturn:
		c.Documents, c.DocTokens, c.QuestionTokens, c.ZipfS, c.OutputTokens = 0, 0, 0, 0, 0
		c.QPS = 8
		c.MaxTurns, c.UserTokensMedian, c.AssistantTokensMedian, c.LengthSigma = 10, 80, 200, 0.9
		c.ThinkMean = 2 * time.Second
	default:
		return WorkloadConfig{}, fmt.Errorf("%w: unknown workload %q (want shared-prefix, multiturn, scale-out, hot-prefix or trace)", ErrWorkload, name)
	}
	return c, nil
}

// Validate reports the first bad parameter.
func (c WorkloadConfig) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrWorkload, c.Name, fmt.Sprintf(f, a...))
	}
	switch {
	case c.Requests < 1:
		return bad("requests %d: want ≥ 1", c.Requests)
	case c.QPS < 0 || math.IsNaN(c.QPS) || math.IsInf(c.QPS, 0):
		return bad("qps %v: want ≥ 0", c.QPS)
	case c.Engines < 1:
		return bad("engines %d: want ≥ 1", c.Engines)
	case c.Model == "":
		return bad("model is empty")
	}
	switch c.Name {
	case WorkloadSharedPrefix, WorkloadHotPrefix, WorkloadScaleOut:
		switch {
		case c.Documents < 1:
			return bad("documents %d: want ≥ 1", c.Documents)
		case c.DocTokens < 1 || c.QuestionTokens < 1:
			return bad("doc tokens %d, question tokens %d: want ≥ 1", c.DocTokens, c.QuestionTokens)
		case c.ZipfS <= 1:
			return bad("zipf exponent %v: want > 1", c.ZipfS)
		case c.OutputTokens < 1:
			return bad("output tokens %d: want ≥ 1", c.OutputTokens)
		case c.Name == WorkloadHotPrefix && (c.HotFraction <= 0 || c.HotFraction >= 1):
			return bad("hot fraction %v: want in (0, 1)", c.HotFraction)
		case c.Name == WorkloadHotPrefix && c.Documents < 2:
			return bad("hot-prefix needs ≥ 2 documents")
		case c.Name == WorkloadScaleOut && (c.JoinEngines < 1 || c.JoinAtFraction <= 0 || c.JoinAtFraction >= 1):
			return bad("join %d engines at %v: want ≥ 1 engine at a fraction in (0, 1)", c.JoinEngines, c.JoinAtFraction)
		}
	case WorkloadMultiturn:
		switch {
		case c.MaxTurns < 1:
			return bad("max turns %d: want ≥ 1", c.MaxTurns)
		case c.UserTokensMedian < 1 || c.AssistantTokensMedian < 1 || c.LengthSigma < 0:
			return bad("message lengths: medians ≥ 1 and sigma ≥ 0")
		case c.ThinkMean < 0:
			return bad("think time %v: want ≥ 0", c.ThinkMean)
		}
	default:
		return fmt.Errorf("%w: unknown workload %q", ErrWorkload, c.Name)
	}
	return nil
}

// Generate builds the trace of a generated workload. The same config, seed and
// tokens-per-word ratio always give the same trace, byte for byte.
func Generate(c WorkloadConfig, text *Text) (*Trace, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if text == nil {
		text = NewText()
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x62656e6368))
	t := &Trace{Workload: c.Name, Model: c.Model, Engines: c.Engines}
	switch c.Name {
	case WorkloadMultiturn:
		generateMultiturn(t, c, text, r)
	default:
		generateDocuments(t, c, text, r)
	}
	if c.Name == WorkloadScaleOut {
		t.Joins = []Join{{AfterRequests: int(float64(len(t.Requests)) * c.JoinAtFraction), Engines: c.JoinEngines}}
	}
	return t, nil
}

// generateDocuments: G documents as system prompts, each request one of them (Zipf, or
// half on the hot one) plus a unique question.
func generateDocuments(t *Trace, c WorkloadConfig, text *Text, r *rand.Rand) {
	docs := make([]string, c.Documents)
	for i := range docs {
		docs[i] = fmt.Sprintf("Reference document %d.\n\n%s", i, text.ForTokens(r, c.DocTokens))
	}
	zipf := rand.NewZipf(r, c.ZipfS, 1, uint64(c.Documents-1))
	var at time.Duration
	for i := 0; i < c.Requests; i++ {
		var d int
		switch {
		case c.HotFraction > 0 && r.Float64() < c.HotFraction:
			d = 0
		case c.HotFraction > 0:
			d = 1 + r.IntN(c.Documents-1)
		default:
			d = int(zipf.Uint64())
		}
		q := fmt.Sprintf("Question %d: %s Answer using the document above.", i, text.ForTokens(r, c.QuestionTokens))
		at += arrivalGap(r, c.QPS)
		t.Requests = append(t.Requests, Request{
			ID: i, At: at, Chain: i, Prefix: "doc-" + strconv.Itoa(d), Path: PathChat,
			Body: chatBody(c.Model, []Message{{Role: "system", Content: docs[d]}, {Role: "user", Content: q}}, c.OutputTokens),
		})
	}
}

// generateMultiturn: ShareGPT-like sessions of 1..MaxTurns turns with log-normal message
// lengths; every turn resends the conversation so far.
func generateMultiturn(t *Trace, c WorkloadConfig, text *Text, r *rand.Rand) {
	meanTurns := float64(c.MaxTurns+1) / 2
	sessionQPS := c.QPS / meanTurns
	var start time.Duration
	for s := 0; len(t.Requests) < c.Requests; s++ {
		start += arrivalGap(r, sessionQPS)
		turns := 1 + r.IntN(c.MaxTurns)
		var msgs []Message
		for k := 0; k < turns && len(t.Requests) < c.Requests; k++ {
			user := logNormalTokens(r, c.UserTokensMedian, c.LengthSigma)
			answer := logNormalTokens(r, c.AssistantTokensMedian, c.LengthSigma)
			msgs = append(msgs, Message{Role: "user", Content: fmt.Sprintf("Session %d turn %d. %s", s, k, text.ForTokens(r, user))})
			var think time.Duration
			if k > 0 && c.ThinkMean > 0 {
				think = time.Duration(r.ExpFloat64() * float64(c.ThinkMean))
			}
			t.Requests = append(t.Requests, Request{
				ID: len(t.Requests), At: start, Chain: s, Turn: k, Think: think,
				Prefix: "session-" + strconv.Itoa(s), Path: PathChat,
				Body: chatBody(c.Model, msgs, answer),
			})
			// The conversation goes on with the recorded answer, as ShareGPT's logs do; the
			// engine's own generated text is not fed back.
			msgs = append(msgs, Message{Role: "assistant", Content: text.ForTokens(r, answer)})
		}
	}
	sort.SliceStable(t.Requests, func(a, b int) bool { return t.Requests[a].At < t.Requests[b].At })
	for i := range t.Requests {
		t.Requests[i].ID = i
	}
}

// arrivalGap is an exponential inter-arrival time at qps (Poisson arrivals); 0 for qps 0.
func arrivalGap(r *rand.Rand, qps float64) time.Duration {
	if qps <= 0 {
		return 0
	}
	return time.Duration(r.ExpFloat64() / qps * float64(time.Second))
}

// logNormalTokens draws a log-normal length with the given median, clamped to [4, 8×median].
func logNormalTokens(r *rand.Rand, median int, sigma float64) int {
	v := float64(median) * math.Exp(sigma*r.NormFloat64())
	return int(math.Max(4, math.Min(v, float64(8*median))))
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []Message     `json:"messages"`
	MaxTokens     int           `json:"max_tokens"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

func chatBody(model string, msgs []Message, maxTokens int) []byte {
	b, err := json.Marshal(chatRequest{Model: model, Messages: msgs, MaxTokens: maxTokens, Stream: true, StreamOptions: streamOptions{IncludeUsage: true}})
	if err != nil {
		panic(err) // only strings and ints: cannot fail
	}
	return b
}

// traceLine is one line of a JSONL trace.
type traceLine struct {
	// Timestamp in seconds (any origin; the first request defines 0).
	Timestamp *float64 `json:"timestamp"`
	// Session optionally chains the requests of one conversation in order.
	Session string          `json:"session"`
	Body    json.RawMessage `json:"body"`
}

// ReadTrace reads a JSONL trace: one object per line, {"timestamp": seconds, "body": {an
// OpenAI chat or completion request}, "session": optional id}. Requests are replayed at
// their timestamps' offsets from the earliest one (open loop), streamed with usage;
// requests of one session run in order. Blank lines and lines starting with '#' are
// skipped. Any bad line fails the whole read with an error naming it, so nothing is
// silently dropped. engines is the fleet size to replay on.
func ReadTrace(rd io.Reader, engines int) (*Trace, error) {
	if engines < 1 {
		return nil, fmt.Errorf("%w: engines %d: want ≥ 1", ErrTrace, engines)
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	t := &Trace{Workload: WorkloadTrace, Engines: engines}
	type raw struct {
		ts   float64
		sess string
		path string
		body []byte
		mdl  string
	}
	var lines []raw
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var tl traceLine
		if err := json.Unmarshal(line, &tl); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrTrace, n, err)
		}
		if tl.Timestamp == nil || math.IsNaN(*tl.Timestamp) || math.IsInf(*tl.Timestamp, 0) {
			return nil, fmt.Errorf("%w: line %d: missing or bad \"timestamp\" (seconds)", ErrTrace, n)
		}
		var body map[string]any
		if err := json.Unmarshal(tl.Body, &body); err != nil || body == nil {
			return nil, fmt.Errorf("%w: line %d: \"body\" must be a JSON object", ErrTrace, n)
		}
		model, _ := body["model"].(string)
		if model == "" {
			return nil, fmt.Errorf("%w: line %d: body has no \"model\"", ErrTrace, n)
		}
		path := PathChat
		if _, ok := body["messages"]; !ok {
			if _, ok := body["prompt"]; !ok {
				return nil, fmt.Errorf("%w: line %d: body has neither \"messages\" nor \"prompt\"", ErrTrace, n)
			}
			path = PathCompletion
		}
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrTrace, n, err)
		}
		lines = append(lines, raw{ts: *tl.Timestamp, sess: tl.Session, path: path, body: b, mdl: model})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTrace, err)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("%w: no requests", ErrTrace)
	}
	sort.SliceStable(lines, func(a, b int) bool { return lines[a].ts < lines[b].ts })
	t0 := lines[0].ts
	chains := map[string]int{}
	turns := map[string]int{}
	for i, l := range lines {
		chain, turn := len(lines)+i, 0
		if l.sess != "" {
			c, ok := chains[l.sess]
			if !ok {
				c = len(chains)
				chains[l.sess] = c
			}
			chain, turn = c, turns[l.sess]
			turns[l.sess]++
		}
		t.Requests = append(t.Requests, Request{
			ID: i, At: time.Duration((l.ts - t0) * float64(time.Second)), Chain: chain, Turn: turn,
			Prefix: l.sess, Path: l.path, Body: l.body,
		})
		if t.Model == "" {
			t.Model = l.mdl
		}
	}
	return t, nil
}
