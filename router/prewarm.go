package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/kvblock"
)

// Results of one pre-warming replay (the result label of kvroute_router_prewarm_requests_total).
const (
	prewarmOK       = "ok"       // the engine answered 2xx: it prefilled and cached the prefix
	prewarmError    = "error"    // connection error or a non-2xx answer
	prewarmTimeout  = "timeout"  // still running when Config.PrewarmTimeout passed
	prewarmCanceled = "canceled" // the instance left the fleet or the router closed
)

// prewarmUserAgent marks replays in engine logs.
const prewarmUserAgent = "kvroute-prewarm"

// prewarmState is one instance's pre-warming: set up when it joined, read by Stats.
type prewarmState struct {
	// active is true while the instance is being pre-warmed: it is no candidate for real
	// traffic then (unless no other instance can take a request).
	active atomic.Bool

	mu       sync.Mutex
	planned  int // prefixes chosen for replay
	ok       int
	failed   int // error or timeout
	skipped  int // not sent: the timeout passed or the run was canceled first
	started  time.Time
	finished time.Time
	cancel   context.CancelFunc
}

// PrewarmStats is one instance's pre-warming in Stats (present once it was pre-warmed).
type PrewarmStats struct {
	// Prefixes is how many hot prefixes were chosen for replay; OK, Failed (errors and
	// timeouts) and Skipped (never sent: the timeout passed first) add up to it once done.
	Prefixes int `json:"prefixes"`
	OK       int `json:"ok"`
	Failed   int `json:"failed"`
	Skipped  int `json:"skipped"`
	// StartedAt is when the instance appeared; DurationSeconds the time until it joined
	// (so far, while still pre-warming).
	StartedAt       time.Time `json:"started_at"`
	DurationSeconds float64   `json:"duration_seconds"`
}

func (p *prewarmState) stats(now time.Time) *PrewarmStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started.IsZero() {
		return nil
	}
	end := p.finished
	if end.IsZero() {
		end = now
	}
	return &PrewarmStats{Prefixes: p.planned, OK: p.ok, Failed: p.failed, Skipped: p.skipped,
		StartedAt: p.started, DurationSeconds: end.Sub(p.started).Seconds()}
}

// stop cancels a pre-warming still running (the instance left the fleet).
func (p *prewarmState) stop() {
	p.mu.Lock()
	c := p.cancel
	p.mu.Unlock()
	if c != nil {
		c()
	}
}

// startPrewarm is called for an instance that newly appeared, before it enters the
// fleet: when hot prefixes it serves are known, it is marked pre-warming (so no request
// picks it) and the replays start; otherwise it joins at once.
func (r *Router) startPrewarm(in *instance) {
	d := in.desc.Load()
	if r.hot == nil || d == nil || r.ctx.Err() != nil {
		return
	}
	list := r.hot.top(r.cfg.PrewarmPrefixes, d.serves)
	if len(list) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.PrewarmTimeout)
	p := &in.prewarm
	p.mu.Lock()
	p.planned, p.started, p.cancel = len(list), time.Now(), cancel
	p.mu.Unlock()
	p.active.Store(true)
	r.log.Info("pre-warming a new instance", "instance", in.id, "prefixes", len(list),
		"timeout", r.cfg.PrewarmTimeout, "concurrency", r.cfg.PrewarmConcurrency)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		r.prewarm(ctx, in, d, list)
	}()
}

// prewarm replays list to in with bounded concurrency until done or ctx ends, then lets
// the instance join. Failures are counted, never fatal.
func (r *Router) prewarm(ctx context.Context, in *instance, d *descriptor, list []hotPrompt) {
	p := &in.prewarm
	work := make(chan hotPrompt)
	var wg sync.WaitGroup
	for range min(r.cfg.PrewarmConcurrency, len(list)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for hp := range work {
				res := r.replay(ctx, in, d, hp)
				r.metrics.prewarmRequests.WithLabelValues(res).Inc()
				p.mu.Lock()
				if res == prewarmOK {
					p.ok++
				} else {
					p.failed++
				}
				p.mu.Unlock()
			}
		}()
	}
	sent := 0
feed:
	for _, hp := range list {
		if ctx.Err() != nil {
			break
		}
		select {
		case work <- hp:
			sent++
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()

	now := time.Now()
	p.mu.Lock()
	p.skipped = len(list) - sent
	p.finished = now
	took := now.Sub(p.started)
	ok, failed, skipped := p.ok, p.failed, p.skipped
	p.mu.Unlock()
	p.active.Store(false)
	r.metrics.prewarmDuration.Observe(took.Seconds())
	const msg = "instance pre-warmed, joining"
	if failed+skipped > 0 {
		r.log.Warn(msg, "instance", in.id, "ok", ok, "failed", failed, "skipped", skipped, "took", took, "cause", context.Cause(ctx))
		return
	}
	r.log.Info(msg, "instance", in.id, "ok", ok, "took", took)
}

// replay sends one prefix to in as a token-id completion with max_tokens=1 and reports
// the result. A success puts the prefix's keys in the pending overlay for the instance,
// as after a routed request the engine answered.
func (r *Router) replay(ctx context.Context, in *instance, d *descriptor, hp hotPrompt) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.rawURL+"/v1/completions", bytes.NewReader(replayBody(hp)))
	if err != nil {
		return prewarmError
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", prewarmUserAgent)
	resp, err := in.client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
	}
	if err != nil || resp.StatusCode/100 != 2 {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return prewarmTimeout
		case ctx.Err() != nil:
			return prewarmCanceled
		}
		r.log.Debug("pre-warming replay failed", "instance", in.id, "err", errString(err, resp))
		return prewarmError
	}
	if r.cfg.PendingTTL > 0 {
		bs := d.blockSize
		if bs <= 0 {
			bs = kvblock.DefaultBlockSize
		}
		keys := kvblock.Keys(nil, seedFor(d, hp.model, hp.salt), hp.ids, bs)
		now := time.Now()
		r.pending.add(keys, in.slot, now.Add(r.cfg.PendingConfirmGrace).UnixNano(), now.UnixNano())
	}
	return prewarmOK
}

// replayBody is {"model":…,"prompt":[ids…],"max_tokens":1[,"cache_salt":…]}: the exact
// tokens the requests shared, so the engine computes the same block hashes.
func replayBody(hp hotPrompt) []byte {
	model, _ := json.Marshal(hp.model)
	b := make([]byte, 0, 64+len(model)+len(hp.salt)+len(hp.ids)*7)
	b = append(b, `{"model":`...)
	b = append(b, model...)
	b = append(b, `,"prompt":[`...)
	for i, id := range hp.ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	b = append(b, `],"max_tokens":1,"stream":false`...)
	if hp.salt != "" {
		salt, _ := json.Marshal(hp.salt)
		b = append(b, `,"cache_salt":`...)
		b = append(b, salt...)
	}
	return append(b, '}')
}
