package router

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// activeFailuresDown consecutive failed active checks mark an instance down.
const activeFailuresDown = 2

// health is one instance's availability: the last active check, and passive failure
// counting that ejects the instance for a cooldown after EjectFailures failures within
// EjectWindow.
type health struct {
	activeOK     atomic.Bool
	activeFails  atomic.Int32 // consecutive failed active checks
	ejectedUntil atomic.Int64 // unix nanoseconds; 0 = not ejected

	mu       sync.Mutex
	failures []int64 // unix nanoseconds of recent failures, oldest first
}

// available reports whether the instance may take a request at now.
func (h *health) available(now int64) bool {
	return h.activeOK.Load() && now >= h.ejectedUntil.Load()
}

func (h *health) ejected(now int64) bool { return now < h.ejectedUntil.Load() }

// fail records a failure at now and reports whether it ejected the instance.
func (h *health) fail(now int64, cfg *Config) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	cut := now - int64(cfg.EjectWindow)
	i := 0
	for i < len(h.failures) && h.failures[i] < cut {
		i++
	}
	h.failures = append(h.failures[:0], h.failures[i:]...)
	h.failures = append(h.failures, now)
	if len(h.failures) < cfg.EjectFailures || now < h.ejectedUntil.Load() {
		return false
	}
	h.ejectedUntil.Store(now + int64(cfg.EjectCooldown))
	h.failures = h.failures[:0]
	return true
}

// checkHealth runs one active check of in: any response other than a 5xx means the
// server is up (an engine without the health path answers 404, which is fine).
func (r *Router) checkHealth(ctx context.Context, in *instance) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.rawURL+r.cfg.HealthPath, nil)
	if err != nil {
		return
	}
	resp, err := in.client.Do(req)
	ok := err == nil && resp.StatusCode < 500
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
	}
	if ctx.Err() != nil && r.ctx.Err() != nil {
		return // shutting down, not the instance's fault
	}
	if !ok {
		r.metrics.upstreamErrors.WithLabelValues(in.id, "health").Inc()
		// Two consecutive failures take the instance out until a check passes; one slow
		// answer on a busy host does not.
		if in.health.activeFails.Add(1) >= activeFailuresDown && in.health.activeOK.Swap(false) {
			r.log.Warn("instance failed its health checks", "instance", in.id, "err", errString(err, resp))
		}
		return
	}
	in.health.activeFails.Store(0)
	if !in.health.activeOK.Swap(true) {
		r.log.Info("instance passed its health check again", "instance", in.id)
	}
}

// healthLoop checks every known instance each HealthInterval, the first time one
// interval after Start (a new instance starts out healthy).
func (r *Router) healthLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f := r.fleet.Load()
		var wg sync.WaitGroup
		for _, in := range f.list {
			wg.Add(1)
			go func() { defer wg.Done(); r.checkHealth(ctx, in) }()
		}
		wg.Wait()
	}
}

// noteFailure counts a passive failure of in (connection error, 5xx, broken stream)
// and ejects it when it crosses the threshold.
func (r *Router) noteFailure(in *instance, kind string) {
	if in.health.fail(time.Now().UnixNano(), &r.cfg) {
		r.metrics.ejected.WithLabelValues(in.id).Set(1)
		r.log.Warn("instance ejected", "instance", in.id, "cause", kind, "cooldown", r.cfg.EjectCooldown)
	}
}

func errString(err error, resp *http.Response) string {
	if err != nil {
		return err.Error()
	}
	if resp != nil {
		return resp.Status
	}
	return ""
}
