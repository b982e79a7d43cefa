package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// staticID is the instance id of a static engine URL: its host:port, sanitized.
func staticID(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return kvroutev1.SanitizeID(raw)
	}
	return kvroutev1.SanitizeID(u.Host)
}

// refresh rebuilds the fleet from the index's instance list.
func (r *Router) refresh() {
	infos := r.idx.instances()
	list := make([]*instance, 0, len(infos))
	changed := false
	old := r.fleet.Load()
	for _, info := range infos {
		if !info.routable || info.engineURL == "" {
			continue
		}
		in, created, err := r.instanceFor(info.id, info.engineURL)
		if err != nil {
			r.log.Warn("instance with a bad engine URL ignored", "instance", info.id, "url", info.engineURL, "err", err)
			continue
		}
		bs := info.blockSize
		if bs <= 0 {
			bs = kvblock.DefaultBlockSize
		}
		if d := in.desc.Load(); d == nil || d.model != info.model || d.blockSize != bs || !equalStrings(d.adapters, info.adapters) {
			in.desc.Store(&descriptor{model: info.model, adapters: append([]string(nil), info.adapters...), blockSize: bs})
			changed = true
		}
		if created {
			// Before the fleet below publishes it: a newcomer being pre-warmed is never
			// picked for real traffic in between.
			r.startPrewarm(in)
		}
		if info.loadOK {
			in.waiting.Store(int64(info.waiting))
			in.running.Store(int64(info.running))
		}
		in.mu.Lock()
		in.idx = info.idx
		in.engineHits, in.engineQueries = info.hits, info.queries
		in.mu.Unlock()
		if old.byID[in.id] != in {
			changed = true
		}
		list = append(list, in)
	}
	if changed || len(list) != len(old.list) {
		f := buildFleet(list)
		r.fleet.Store(f)
		r.log.Debug("fleet changed", "instances", len(list))
		r.prune(f)
	}
}

// prune forgets instances that left the fleet (requests still in flight keep their own
// pointer) and closes their idle connections.
func (r *Router) prune(f *fleet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, in := range r.instances {
		if f.byID[id] != in {
			delete(r.instances, id)
			in.prewarm.stop()
			in.client.CloseIdleConnections()
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// scrapeAll polls every static engine's /v1/models and /metrics.
func (r *Router) scrapeAll() {
	f := r.fleet.Load()
	var wg sync.WaitGroup
	changed := make(chan bool, len(f.list))
	for _, in := range f.list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			changed <- r.scrape(in)
		}()
	}
	wg.Wait()
	close(changed)
	rebuild := false
	for c := range changed {
		rebuild = rebuild || c
	}
	if rebuild {
		r.fleet.Store(buildFleet(append([]*instance(nil), f.list...)))
	}
}

// scrape reads one static engine's models and load; it reports whether its descriptor changed.
func (r *Router) scrape(in *instance) bool {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.HealthTimeout+r.cfg.ScrapeInterval)
	defer cancel()
	changed := false
	if d, err := fetchModels(ctx, in); err == nil {
		if old := in.desc.Load(); old == nil || old.model != d.model || !equalStrings(old.adapters, d.adapters) {
			in.desc.Store(d)
			changed = true
		}
	} else if r.ctx.Err() == nil {
		r.log.Debug("engine models not readable", "instance", in.id, "err", err)
	}
	if l, err := fetchLoad(ctx, in); err == nil {
		in.waiting.Store(int64(l.waiting))
		in.running.Store(int64(l.running))
		in.mu.Lock()
		in.engineHits, in.engineQueries = l.hits, l.queries
		in.mu.Unlock()
	}
	return changed
}

func getOK(ctx context.Context, in *instance, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.rawURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := in.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		drain(resp)
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return resp, nil
}

// fetchModels reads an engine's /v1/models: the entry without a parent is the base
// model, entries with one are LoRA adapters.
func fetchModels(ctx context.Context, in *instance) (*descriptor, error) {
	resp, err := getOK(ctx, in, "/v1/models")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list); err != nil {
		return nil, err
	}
	d := &descriptor{blockSize: kvblock.DefaultBlockSize}
	for _, m := range list.Data {
		if m.Parent == nil || *m.Parent == "" || *m.Parent == m.ID {
			if d.model == "" {
				d.model = m.ID
			}
			continue
		}
		d.adapters = append(d.adapters, m.ID)
	}
	if d.model == "" {
		return nil, fmt.Errorf("no base model in /v1/models")
	}
	return d, nil
}

type engineLoad struct {
	running, waiting float64
	hits, queries    float64
}

// fetchLoad scrapes the vLLM gauges and counters the router uses from /metrics.
func fetchLoad(ctx context.Context, in *instance) (engineLoad, error) {
	var l engineLoad
	resp, err := getOK(ctx, in, "/metrics")
	if err != nil {
		return l, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return l, err
	}
	l.running = sumFamily(fams["vllm:num_requests_running"])
	l.waiting = sumFamily(fams["vllm:num_requests_waiting"])
	l.hits = sumFamily(fams["vllm:prefix_cache_hits_total"])
	if l.hits == 0 {
		l.hits = sumFamily(fams["vllm:prefix_cache_hits"])
	}
	l.queries = sumFamily(fams["vllm:prefix_cache_queries_total"])
	if l.queries == 0 {
		l.queries = sumFamily(fams["vllm:prefix_cache_queries"])
	}
	return l, nil
}

func sumFamily(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	s := 0.0
	for _, m := range f.GetMetric() {
		switch {
		case m.Gauge != nil:
			s += m.GetGauge().GetValue()
		case m.Counter != nil:
			s += m.GetCounter().GetValue()
		case m.Untyped != nil:
			s += m.GetUntyped().GetValue()
		}
	}
	return s
}

// housekeeping refreshes the gauges computed from state once a second.
func (r *Router) housekeeping() {
	now := time.Now()
	nowNS := now.UnixNano()
	var lag time.Duration
	seen := false
	for _, in := range r.fleet.Load().list {
		ej := 0.0
		if in.health.ejected(nowNS) {
			ej = 1
		}
		r.metrics.ejected.WithLabelValues(in.id).Set(ej)
		in.mu.Lock()
		if in.idx.warm {
			r.metrics.warmup.WithLabelValues(in.id).Set(in.idx.warmup.Seconds())
		}
		if !in.idx.lastUpdate.IsZero() {
			lag, seen = max(lag, in.idx.lag), true
		}
		in.mu.Unlock()
	}
	if seen {
		r.metrics.eventLag.Set(lag.Seconds())
	}
	sum, _ := r.window.sum(now)
	if sum.requests > 0 {
		r.metrics.overflowRatio.Set(float64(sum.decisions[DecisionOverflow]) / float64(sum.requests))
	} else {
		r.metrics.overflowRatio.Set(0)
	}
}

// serveModels answers GET /v1/models with the union of healthy instances' models and
// adapters, in OpenAI's list shape.
func (r *Router) serveModels(w http.ResponseWriter, _ *http.Request) {
	type entry struct {
		ID      string  `json:"id"`
		Object  string  `json:"object"`
		Created int64   `json:"created"`
		OwnedBy string  `json:"owned_by"`
		Root    string  `json:"root"`
		Parent  *string `json:"parent"`
	}
	now := time.Now().UnixNano()
	seen := map[string]bool{}
	out := struct {
		Object string  `json:"object"`
		Data   []entry `json:"data"`
	}{Object: "list", Data: []entry{}}
	for _, in := range r.fleet.Load().list {
		d := in.desc.Load()
		if d == nil || !in.health.available(now) {
			continue
		}
		if !seen[d.model] {
			seen[d.model] = true
			out.Data = append(out.Data, entry{ID: d.model, Object: "model", Created: time.Now().Unix(), OwnedBy: "kvroute", Root: d.model})
		}
		for _, a := range d.adapters {
			if seen[a] {
				continue
			}
			seen[a] = true
			parent := d.model
			out.Data = append(out.Data, entry{ID: a, Object: "model", Created: time.Now().Unix(), OwnedBy: "kvroute", Root: a, Parent: &parent})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
