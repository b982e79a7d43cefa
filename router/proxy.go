package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/openai"
)

// Debug response headers (Config.DebugHeaders).
const (
	HeaderInstance = "X-Kvroute-Instance"
	HeaderDecision = "X-Kvroute-Decision"
)

// maxResponseBytes bounds a buffered (non-streaming) upstream response body.
const maxResponseBytes = 256 << 20

var (
	bufPool   = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	chunkPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
)

// maxPooledBytes: buffers that grew beyond this (huge bodies) are left to the GC rather
// than kept in the pool.
const maxPooledBytes = 1 << 20

func putBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBytes {
		bufPool.Put(b)
	}
}

// hopHeaders are connection-level headers a proxy must not forward.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func (r *Router) serveChat(w http.ResponseWriter, req *http.Request) {
	r.serveOpenAI(w, req, openai.ParseChat)
}

func (r *Router) serveCompletion(w http.ResponseWriter, req *http.Request) {
	r.serveOpenAI(w, req, openai.ParseCompletion)
}

// readBody checks the content type and size and reads the body into a pooled buffer.
func (r *Router) readBody(w http.ResponseWriter, req *http.Request) (*bytes.Buffer, error) {
	if ct := req.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := strings.Cut(ct, ";")
		if !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
			return nil, fmt.Errorf("%w, got %q", ErrContentType, ct)
		}
	}
	if req.ContentLength > r.cfg.MaxBodyBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, req.ContentLength, r.cfg.MaxBodyBytes)
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(r.cfg.BodyReadTimeout)) == nil
	_, err := buf.ReadFrom(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes))
	if err != nil {
		// The deadline stays: the server must not wait for the rest of a broken body.
		putBuf(buf)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: limit %d bytes", ErrTooLarge, r.cfg.MaxBodyBytes)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, openai.NewError(http.StatusRequestTimeout, "invalid_request_error", "request_timeout", "request body not received in time")
		}
		return nil, openai.BadRequest("", "reading the request body: "+err.Error())
	}
	if deadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return buf, nil
}

// serveOpenAI handles /v1/chat/completions and /v1/completions.
func (r *Router) serveOpenAI(w http.ResponseWriter, req *http.Request, parse func([]byte) (*openai.Request, error)) {
	start := time.Now()
	buf, err := r.readBody(w, req)
	if err != nil {
		r.reject(w, err, "")
		return
	}
	defer putBuf(buf)
	parsed, err := parse(buf.Bytes())
	if err != nil {
		r.reject(w, err, "")
		return
	}
	d, err := r.routeOpenAI(req.Context(), req.Header, parsed, start)
	if err != nil {
		model := ""
		if !errors.Is(err, ErrUnknownModel) {
			model = parsed.Model
		}
		r.reject(w, err, model)
		return
	}
	defer r.release(d.st)
	r.metrics.routingDuration.Observe(d.took.Seconds())
	body := buf.Bytes()
	o := fwdOpts{path: req.URL.Path, model: parsed.Model, stream: parsed.Stream}
	if parsed.Stream && !parsed.StreamIncludeUsage {
		// Ask for the usage chunk (for cached_tokens) and strip it from the client's stream.
		// A client's own stream_options comes later in the object and wins.
		if b, ok := injectIncludeUsage(body); ok {
			body, o.stripUsage = b, true
		}
	}
	r.forward(w, req, d, body, o)
}

// injectIncludeUsage returns body with "stream_options":{"include_usage":true} as its first member.
func injectIncludeUsage(body []byte) ([]byte, bool) {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body, false
	}
	rest := bytes.TrimLeft(body[i+1:], " \t\r\n")
	if len(rest) == 0 || rest[0] == '}' {
		return body, false
	}
	const member = `"stream_options":{"include_usage":true},`
	out := make([]byte, 0, len(body)+len(member))
	out = append(out, body[:i+1]...)
	out = append(out, member...)
	out = append(out, body[i+1:]...)
	return out, true
}

// reject answers a request that was never sent upstream.
func (r *Router) reject(w http.ResponseWriter, err error, model string) {
	ae := apiError(err)
	r.metrics.requests.WithLabelValues(DecisionNone.String(), model, strconv.Itoa(ae.Status)).Inc()
	openai.WriteError(w, ae)
}

type fwdOpts struct {
	path       string
	model      string
	stream     bool
	stripUsage bool
}

// outcome is what came back from the engine, for metrics and learning.
type outcome struct {
	code         int
	firstByte    time.Time
	engineCached int // -1 when the engine did not report usage
	promptTokens int // engine-reported prompt tokens, -1 when unknown
	failed       string
}

// forward sends the request to the decided instance, retrying once on the next-best
// instance after a connection error or a 5xx before any byte reached the client, and
// relays the response.
func (r *Router) forward(w http.ResponseWriter, creq *http.Request, d *decision, body []byte, o fwdOpts) {
	ctx, cancel := context.WithTimeout(creq.Context(), r.cfg.TotalTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		in := d.inst()
		sent := time.Now()
		r.dispatch(d, sent)
		resp, err := r.send(ctx, in, creq, o.path, body)
		if err == nil && resp.StatusCode < 500 {
			out := r.relay(w, creq, resp, d, o, sent)
			r.done(d, out, o)
			return
		}
		kind, status := "status_5xx", 0
		var upErr error
		if err != nil {
			kind = "connect"
			upErr = fmt.Errorf("%w: %s: %v", ErrUpstream, in.id, err)
			if isTimeout(err) {
				kind = "timeout"
				upErr = fmt.Errorf("%w: %s: %v", ErrUpstreamTimeout, in.id, err)
			}
		} else {
			status = resp.StatusCode
		}
		clientGone := creq.Context().Err() != nil
		if !clientGone {
			r.metrics.upstreamErrors.WithLabelValues(in.id, kind).Inc()
			r.noteFailure(in, kind)
		}
		if attempt == 0 && !clientGone && r.retarget(d) {
			if resp != nil {
				drain(resp)
			}
			r.done(d, outcome{code: status, engineCached: -1, promptTokens: -1, failed: kind}, o)
			r.metrics.retries.Inc()
			r.log.Debug("retrying on another instance", "failed", in.id, "kind", kind, "next", d.inst().id)
			continue
		}
		if resp != nil { // relay the engine's own 5xx
			out := r.relay(w, creq, resp, d, o, sent)
			r.done(d, out, o)
			return
		}
		ae := apiError(upErr)
		if clientGone {
			ae.Status = 499 // nginx's "client closed request", for the metrics only
		} else {
			r.writeDebugHeaders(w, d)
			openai.WriteError(w, ae)
		}
		r.done(d, outcome{code: ae.Status, engineCached: -1, promptTokens: -1, failed: kind}, o)
		return
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
}

// retarget drops the chosen candidate and asks the policy again; false when none is left.
func (r *Router) retarget(d *decision) bool {
	st := d.st
	if len(st.cands) < 2 {
		return false
	}
	i := d.chosen
	last := len(st.cands) - 1
	st.cands[i], st.cands[last] = st.cands[last], st.cands[i]
	st.cands = st.cands[:last]
	if len(st.group) > last {
		st.group[i], st.group[last] = st.group[last], st.group[i]
		st.group = st.group[:last]
	}
	if len(st.runs) > last {
		st.runs[i], st.runs[last] = st.runs[last], st.runs[i]
		st.runs = st.runs[:last]
	}
	d.chosen, d.why = r.policy.Select(&d.info, st.cands)
	if d.chosen < 0 {
		d.chosen, d.why = Overflow{}.Select(&d.info, st.cands)
	}
	d.predicted = st.cands[d.chosen].CachedTokens
	d.keysFrom = 0
	if len(st.runs) > d.chosen && st.group[d.chosen] >= 0 {
		d.keysFrom = st.runs[d.chosen]
	}
	return true
}

// send issues the upstream request.
func (r *Router) send(ctx context.Context, in *instance, creq *http.Request, path string, body []byte) (*http.Response, error) {
	up, err := http.NewRequestWithContext(ctx, creq.Method, in.rawURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range creq.Header {
		if isHop(k) || k == "Content-Length" || k == "Accept-Encoding" {
			continue
		}
		up.Header[k] = vs
	}
	for _, c := range creq.Header.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			up.Header.Del(strings.TrimSpace(f))
		}
	}
	up.ContentLength = int64(len(body))
	if up.Header.Get("Content-Type") == "" {
		up.Header.Set("Content-Type", "application/json")
	}
	return in.client.Do(up)
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}

func (r *Router) writeDebugHeaders(w http.ResponseWriter, d *decision) {
	if r.cfg.DebugHeaders {
		w.Header().Set(HeaderInstance, d.inst().id)
		w.Header().Set(HeaderDecision, d.why.String())
	}
}

// relay copies the upstream response to the client: SSE event by event with a flush
// after every read, anything else buffered (to read usage) and written at once.
func (r *Router) relay(w http.ResponseWriter, creq *http.Request, resp *http.Response, d *decision, o fwdOpts, sent time.Time) outcome {
	defer resp.Body.Close()
	out := outcome{code: resp.StatusCode, engineCached: -1, promptTokens: -1}
	h := w.Header()
	for k, vs := range resp.Header {
		if isHop(k) || k == "Content-Length" {
			continue
		}
		h[k] = vs
	}
	r.writeDebugHeaders(w, d)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if !sse {
		buf := bufPool.Get().(*bytes.Buffer)
		defer putBuf(buf)
		buf.Reset()
		_, err := buf.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes))
		out.firstByte = time.Now()
		r.firstByte(d, out.firstByte, sent, o.stream)
		if err != nil {
			out.failed = "stream"
			if creq.Context().Err() == nil {
				r.metrics.upstreamErrors.WithLabelValues(d.inst().id, "stream").Inc()
				r.noteFailure(d.inst(), "stream")
				openai.WriteError(w, apiError(fmt.Errorf("%w: %s: reading the response: %v", ErrUpstream, d.inst().id, err)))
				out.code = http.StatusBadGateway
			}
			return out
		}
		if resp.StatusCode < 300 {
			readUsage(buf.Bytes(), &out)
		}
		h.Set("Content-Length", strconv.Itoa(buf.Len()))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(buf.Bytes())
		return out
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	s := sseRelay{w: w, strip: o.stripUsage, out: &out}
	cp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(cp)
	chunk := *cp
	for {
		n, err := resp.Body.Read(chunk)
		if n > 0 {
			if out.firstByte.IsZero() {
				out.firstByte = time.Now()
				r.firstByte(d, out.firstByte, sent, true)
			}
			if werr := s.feed(chunk[:n]); werr != nil {
				out.failed = "client"
				return out // client went away; ctx cancel stops the upstream
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			s.finish()
			_ = rc.Flush()
			return out
		}
		if err != nil {
			out.failed = "stream"
			if creq.Context().Err() != nil {
				return out
			}
			if out.firstByte.IsZero() {
				out.firstByte = time.Now()
				r.firstByte(d, out.firstByte, sent, false)
			}
			r.metrics.upstreamErrors.WithLabelValues(d.inst().id, "stream").Inc()
			r.noteFailure(d.inst(), "stream")
			s.writeError(fmt.Sprintf("upstream %s failed mid-stream: %v", d.inst().id, err))
			_ = rc.Flush()
			out.code = http.StatusBadGateway
			return out
		}
	}
}

// sseRelay splits a byte stream into SSE events, reads usage from them and drops the
// usage-only chunk the router asked for on the client's behalf.
type sseRelay struct {
	w     io.Writer
	strip bool
	carry []byte
	out   *outcome
}

func (s *sseRelay) feed(p []byte) error {
	data := p
	if len(s.carry) > 0 {
		s.carry = append(s.carry, p...)
		data = s.carry
	}
	start, pos := 0, 0 // data[start:pos] is complete events not yet written
	for {
		i := bytes.Index(data[pos:], sseSep)
		if i < 0 {
			break
		}
		end := pos + i + len(sseSep)
		if !s.inspect(data[pos:end]) {
			if pos > start {
				if _, err := s.w.Write(data[start:pos]); err != nil {
					return err
				}
			}
			start = end
		}
		pos = end
	}
	if pos > start {
		if _, err := s.w.Write(data[start:pos]); err != nil {
			return err
		}
	}
	s.carry = append(s.carry[:0], data[pos:]...)
	return nil
}

var sseSep = []byte("\n\n")

// inspect reads usage from one event and reports whether to pass it on.
func (s *sseRelay) inspect(ev []byte) bool {
	if !bytes.Contains(ev, []byte(`"prompt_tokens"`)) {
		return true
	}
	payload := ev
	if j := bytes.Index(ev, []byte("data:")); j >= 0 {
		payload = bytes.TrimSpace(ev[j+5:])
	}
	var chunk struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *usageJSON        `json:"usage"`
	}
	if json.Unmarshal(payload, &chunk) != nil || chunk.Usage == nil {
		return true
	}
	s.out.promptTokens = chunk.Usage.PromptTokens
	s.out.engineCached = 0
	if chunk.Usage.Details != nil {
		s.out.engineCached = chunk.Usage.Details.CachedTokens
	}
	return !(s.strip && len(chunk.Choices) == 0)
}

func (s *sseRelay) finish() {
	if len(s.carry) > 0 {
		if s.inspect(s.carry) {
			_, _ = s.w.Write(s.carry)
		}
		s.carry = s.carry[:0]
	}
}

func (s *sseRelay) writeError(msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": "upstream_error", "code": http.StatusBadGateway,
	}})
	_, _ = s.w.Write([]byte("data: "))
	_, _ = s.w.Write(b)
	_, _ = s.w.Write([]byte("\n\ndata: [DONE]\n\n"))
}

type usageJSON struct {
	PromptTokens int `json:"prompt_tokens"`
	Details      *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func readUsage(body []byte, out *outcome) {
	var resp struct {
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(body, &resp) != nil || resp.Usage == nil {
		return
	}
	out.promptTokens = resp.Usage.PromptTokens
	out.engineCached = 0
	if resp.Usage.Details != nil {
		out.engineCached = resp.Usage.Details.CachedTokens
	}
}

// dispatch books the request on the chosen instance: in-flight, prefill backlog and the
// pending overlay.
func (r *Router) dispatch(d *decision, now time.Time) {
	in := d.inst()
	in.inFlight.Add(1)
	r.metrics.inFlight.WithLabelValues(in.id).Inc()
	if d.promptTokens > 0 {
		uncached := d.promptTokens - d.predicted
		in.backlogTokens.Add(int64(uncached))
		in.learnUncached(uncached)
		if keys := d.chosenKeys(); len(keys) > 0 && r.cfg.PendingTTL > 0 {
			r.pending.add(keys, in.slot, now.Add(r.cfg.PendingTTL).UnixNano(), now.UnixNano())
		}
	}
	d.firstSeen = false
	d.sentAt = now
}

// firstByte runs once per attempt when the engine's first byte arrives: the prefill is
// done, so the backlog shrinks, the prefill rate learns, and the pending entries get
// PendingConfirmGrace for the index to confirm them.
func (r *Router) firstByte(d *decision, at, sent time.Time, learn bool) {
	if d.firstSeen {
		return
	}
	d.firstSeen = true
	in := d.inst()
	if d.promptTokens <= 0 {
		return
	}
	uncached := d.promptTokens - d.predicted
	backlog := in.backlogTokens.Add(-int64(uncached))
	if learn {
		in.learnPrefill(int(backlog)+uncached, at.Sub(sent), r.cfg.PrefillPriorTokensPerSecond)
	}
	if keys := d.chosenKeys(); len(keys) > 0 {
		r.pending.expireBy(keys, in.slot, at.Add(r.cfg.PendingConfirmGrace).UnixNano(), at.UnixNano())
	}
}

// done closes the attempt's bookkeeping and records its metrics and stats.
func (r *Router) done(d *decision, out outcome, o fwdOpts) {
	in := d.inst()
	now := time.Now()
	if !d.firstSeen {
		r.firstByte(d, now, now, false)
	}
	in.inFlight.Add(-1)
	r.metrics.inFlight.WithLabelValues(in.id).Dec()
	if out.failed != "" && d.promptTokens > 0 {
		// The engine may not have cached anything: drop the pending entries now.
		if keys := d.chosenKeys(); len(keys) > 0 {
			r.pending.expireBy(keys, in.slot, now.UnixNano(), now.UnixNano())
		}
	}
	code := strconv.Itoa(out.code)
	r.metrics.requests.WithLabelValues(d.why.String(), o.model, code).Inc()
	var ttft time.Duration
	if o.stream && !out.firstByte.IsZero() && out.failed == "" {
		ttft = out.firstByte.Sub(d.sentAt)
		r.metrics.ttft.WithLabelValues(in.id).Observe(ttft.Seconds())
	}
	if d.promptTokens > 0 {
		r.metrics.predictedCached.Add(float64(d.predicted))
	}
	if out.engineCached >= 0 {
		r.metrics.engineCached.Add(float64(out.engineCached))
		if d.promptTokens > 0 {
			diff := out.engineCached - d.predicted
			r.metrics.predictionError.Observe(float64(diff))
			switch {
			case diff == 0:
				r.metrics.predictionMatches.WithLabelValues("exact").Inc()
			case diff > 0:
				r.metrics.predictionMatches.WithLabelValues("under").Inc()
			default:
				r.metrics.predictionMatches.WithLabelValues("over").Inc()
			}
		}
	}
	if r.hot != nil && len(d.ids) > 0 && out.failed == "" && out.code/100 == 2 {
		r.hot.record(o.model, d.salt, d.ids, now)
	}
	prompt := out.promptTokens
	if prompt < 0 {
		prompt = d.promptTokens
	}
	r.window.record(now, d.why, prompt, out.engineCached, d.predicted)
	in.stats.record(d.why, ttft, out.failed != "")
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("request routed", "instance", in.id, "decision", d.why.String(), "model", o.model,
			"predicted_cached_tokens", d.predicted, "engine_cached_tokens", out.engineCached,
			"prompt_tokens", d.promptTokens, "routing_us", d.took.Microseconds(), "code", out.code, "ttft_ms", ttft.Milliseconds())
	}
}
