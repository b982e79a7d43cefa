package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Response headers the router sets with debug headers on.
const (
	HeaderInstance = "X-Kvroute-Instance"
	HeaderDecision = "X-Kvroute-Decision"
)

// ErrLoad is returned when the load generator is misconfigured.
var ErrLoad = errors.New("bench: bad load configuration")

// Sample is what the client measured for one request. Times are wall-clock offsets and
// durations; the report converts them to simulated time.
type Sample struct {
	ID    int `json:"id"`
	Chain int `json:"chain"`
	// Start is when the request was sent, since the start of the run.
	Start time.Duration `json:"start_ns"`
	// TTFT is the time from sending to the first SSE chunk that carries content.
	TTFT time.Duration `json:"ttft_ns"`
	// Latency is the time from sending to the end of the stream.
	Latency time.Duration `json:"latency_ns"`
	Status  int           `json:"status"`
	Err     string        `json:"error,omitempty"`
	// Instance and Decision come from the router's debug headers.
	Instance string `json:"instance,omitempty"`
	Decision string `json:"decision,omitempty"`
	// Token counts from the stream's usage chunk (cached = prompt_tokens_details.cached_tokens).
	PromptTokens     int `json:"prompt_tokens"`
	CachedTokens     int `json:"cached_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// OK reports whether the request completed with a streamed answer.
func (s *Sample) OK() bool { return s.Err == "" && s.Status == http.StatusOK }

// Driver sends a trace to one base URL over real HTTP and measures each request.
type Driver struct {
	// BaseURL is the router's http://host:port.
	BaseURL string
	Client  *http.Client
	// TimeScale converts the trace's simulated times to wall time (wall = simulated × scale).
	TimeScale float64
	// Concurrency > 0 runs closed-loop with that many clients, each running one chain at a
	// time without pauses; 0 runs open-loop at the trace's planned arrivals.
	Concurrency int
	// RequestTimeout bounds one request in wall time (0 = 10 minutes).
	RequestTimeout time.Duration
	// OnDispatch, if set, is called (from the dispatching goroutine) with the number of
	// requests dispatched so far; the harness uses it to add engines mid-run. It must not block.
	OnDispatch func(dispatched int)
	// Progress, if set, is told about every completed request.
	Progress *Progress
}

// RunResult is what a Driver measured over a whole trace.
type RunResult struct {
	// Samples holds one Sample per request, in trace order.
	Samples []Sample
	// Wall is the wall time from the start to the last completion.
	Wall time.Duration
	// LoadEnd is when the offered load stopped being full: closed loop, the first time a
	// client found no more work; open loop, the last dispatch. Completions after it are
	// the drain of the run.
	LoadEnd time.Duration
}

// Run sends every request of t and measures each. It returns early with ctx's error if
// ctx ends; the samples gathered so far are returned with it.
func (d *Driver) Run(ctx context.Context, t *Trace) (*RunResult, error) {
	if d.BaseURL == "" || d.Client == nil {
		return nil, fmt.Errorf("%w: base URL and client are required", ErrLoad)
	}
	if d.TimeScale <= 0 {
		return nil, fmt.Errorf("%w: time scale %v: want > 0", ErrLoad, d.TimeScale)
	}
	samples := make([]Sample, len(t.Requests))
	for i, r := range t.Requests {
		samples[i] = Sample{ID: i, Chain: r.Chain, Err: "not sent"}
	}
	chains := t.Chains()
	var dispatched, loadEnd atomic.Int64
	start := time.Now()
	markEnd := func(closed bool) {
		now := int64(time.Since(start))
		for {
			old := loadEnd.Load()
			if (closed && old != 0) || (!closed && old >= now) {
				return
			}
			if loadEnd.CompareAndSwap(old, now) {
				return
			}
		}
	}
	run := func(id int) {
		n := dispatched.Add(1)
		if d.Concurrency == 0 {
			markEnd(false)
		}
		if d.OnDispatch != nil {
			d.OnDispatch(int(n))
		}
		samples[id] = d.send(ctx, start, &t.Requests[id])
		if d.Progress != nil {
			d.Progress.Done(samples[id].OK())
		}
	}
	var wg sync.WaitGroup
	if d.Concurrency > 0 {
		next := make(chan []int)
		for w := 0; w < d.Concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for chain := range next {
					for _, id := range chain {
						if ctx.Err() != nil {
							return
						}
						run(id)
					}
				}
				markEnd(true) // the first client out of work ends the full load
			}()
		}
	feed:
		for _, c := range chains {
			select {
			case next <- c:
			case <-ctx.Done():
				break feed
			}
		}
		close(next)
	} else {
		for _, c := range chains {
			wg.Add(1)
			go func(chain []int) {
				defer wg.Done()
				var prevEnd time.Time
				for _, id := range chain {
					r := &t.Requests[id]
					due := start.Add(d.wall(r.At))
					if !prevEnd.IsZero() {
						if after := prevEnd.Add(d.wall(r.Think)); after.After(due) {
							due = after
						}
					}
					if !sleepUntil(ctx, due) {
						return
					}
					run(id)
					prevEnd = time.Now()
				}
			}(c)
		}
	}
	wg.Wait()
	return &RunResult{Samples: samples, Wall: time.Since(start), LoadEnd: time.Duration(loadEnd.Load())}, ctx.Err()
}

func (d *Driver) wall(sim time.Duration) time.Duration {
	return time.Duration(float64(sim) * d.TimeScale)
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	wait := time.Until(t)
	if wait <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(wait)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// streamChunk is the part of an OpenAI streaming chunk the client reads.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// send performs one streaming request and measures it.
func (d *Driver) send(ctx context.Context, runStart time.Time, r *Request) Sample {
	s := Sample{ID: r.ID, Chain: r.Chain}
	timeout := d.RequestTimeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(d.BaseURL, "/")+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		s.Err = err.Error()
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	t0 := time.Now()
	s.Start = t0.Sub(runStart)
	resp, err := d.Client.Do(req)
	if err != nil {
		s.Err = err.Error()
		s.Latency = time.Since(t0)
		return s
	}
	defer resp.Body.Close()
	s.Status = resp.StatusCode
	s.Instance = resp.Header.Get(HeaderInstance)
	s.Decision = resp.Header.Get(HeaderDecision)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		s.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		s.Latency = time.Since(t0)
		return s
	}
	var firstChunk time.Duration
	done := false
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// An oversized line: gather it whole.
			rest, err2 := br.ReadBytes('\n')
			line = append(append([]byte(nil), line...), rest...)
			err = err2
		}
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if bytes.Equal(data, []byte("[DONE]")) {
				done = true
				break
			}
			var c streamChunk
			if jerr := json.Unmarshal(data, &c); jerr != nil {
				s.Err = "bad stream chunk: " + jerr.Error()
				break
			}
			if c.Error != nil {
				s.Err = "stream error: " + c.Error.Message
				break
			}
			if len(c.Choices) > 0 {
				if firstChunk == 0 {
					firstChunk = time.Since(t0)
				}
				if s.TTFT == 0 && (c.Choices[0].Delta.Content != "" || c.Choices[0].Text != "") {
					s.TTFT = time.Since(t0)
				}
			}
			if c.Usage != nil {
				s.PromptTokens = c.Usage.PromptTokens
				s.CompletionTokens = c.Usage.CompletionTokens
				if c.Usage.PromptTokensDetails != nil {
					s.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				s.Err = err.Error()
			}
			break
		}
	}
	s.Latency = time.Since(t0)
	if s.TTFT == 0 {
		// No content at all (e.g. an empty answer): the first chunk is the first token.
		s.TTFT = firstChunk
	}
	if s.Err == "" && !done {
		s.Err = "stream ended without [DONE]"
	}
	return s
}

// Progress draws a one-line progress bar on a terminal stream (stderr); on anything
// that is not a terminal (a log file, CI) it prints a plain line every 10%.
type Progress struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	label     string
	total     int
	done, bad int
	start     time.Time
	last      time.Time
	lastTenth int
}

// NewProgress returns a bar for total requests labelled label; w nil disables it.
func NewProgress(w io.Writer, label string, total int) *Progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &Progress{w: w, tty: tty, label: label, total: total, start: time.Now()}
}

// Done records one completed request and redraws at most 5 times a second.
func (p *Progress) Done(ok bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if !ok {
		p.bad++
	}
	if p.w == nil {
		return
	}
	if !p.tty {
		if tenth := p.done * 10 / max(p.total, 1); tenth > p.lastTenth {
			p.lastTenth = tenth
			p.draw()
			fmt.Fprintln(p.w)
		}
		return
	}
	if time.Since(p.last) >= 200*time.Millisecond || p.done == p.total {
		p.last = time.Now()
		p.draw()
	}
}

// Finish ends the bar's line.
func (p *Progress) Finish() {
	if p == nil || p.w == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw()
	fmt.Fprintln(p.w)
}

func (p *Progress) draw() {
	const width = 30
	filled := 0
	if p.total > 0 {
		filled = p.done * width / p.total
	}
	el := time.Since(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(p.done) / el
	}
	cr := "\r"
	if !p.tty {
		cr = ""
	}
	fmt.Fprintf(p.w, "%s%-28s [%s%s] %d/%d  %.1f req/s  errors %d ", cr, p.label,
		strings.Repeat("#", filled), strings.Repeat("-", width-filled), p.done, p.total, rate, p.bad)
}
