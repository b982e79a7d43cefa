package router

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// descriptor is what an instance serves; replaced whole when it changes.
type descriptor struct {
	model     string
	adapters  []string
	blockSize int
}

func (d *descriptor) serves(model string) bool {
	return d.model == model || slices.Contains(d.adapters, model)
}

// indexState mirrors the index's view of an instance (for Stats and warm-up).
type indexState struct {
	state      string
	blocks     int
	epoch      uint64
	lastSeq    uint64
	joinedAt   time.Time
	lastUpdate time.Time
	// lag is the index's moving average of engine batch time → applied.
	lag          time.Duration
	hitRate      float64
	fleetHitRate float64
	warm         bool
	warmup       time.Duration
}

// instance is one engine as the router tracks it. Its identity fields never change; the
// rest is atomics or guarded by mu, so the request path reads it without locks.
type instance struct {
	id      string
	idHash  uint64
	slot    uint32 // small stable number, the pending overlay's instance id
	baseURL *url.URL
	rawURL  string
	client  *http.Client

	desc atomic.Pointer[descriptor]

	// Load, as counts of requests.
	inFlight atomic.Int64 // sent by this replica, not finished
	remote   atomic.Int64 // other replicas' in-flight, summed
	waiting  atomic.Int64 // the engine's waiting queue (heartbeat or scrape)
	running  atomic.Int64
	// backlogTokens are uncached prompt tokens sent by this replica whose first byte has
	// not come back: the prefill queue this router knows about.
	backlogTokens atomic.Int64
	// prefillRate is the learned prefill speed in tokens/s (float64 bits).
	prefillRate atomic.Uint64
	// uncachedEWMA is the mean uncached prompt tokens per request (float64 bits), used to
	// cost the engine's waiting queue.
	uncachedEWMA atomic.Uint64

	health  health
	stats   instanceStats
	prewarm prewarmState

	mu  sync.Mutex
	idx indexState
	// engine-side counters from the last heartbeat/scrape, for Stats.
	engineHits, engineQueries float64
}

func newInstance(id, rawURL string, slot uint32, cfg *Config) (*instance, error) {
	u, err := url.Parse(trimURL(rawURL))
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("no host in URL %q", rawURL)
	}
	in := &instance{
		id:      id,
		idHash:  xxhash.Sum64String(id),
		slot:    slot,
		baseURL: u,
		rawURL:  u.String(),
		client:  &http.Client{Transport: newTransport(cfg)},
	}
	in.prefillRate.Store(math.Float64bits(cfg.PrefillPriorTokensPerSecond))
	in.health.activeOK.Store(true)
	in.stats.init()
	return in, nil
}

// newTransport is one instance's keep-alive pool.
func newTransport(cfg *Config) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          cfg.MaxIdleConnsPerInstance,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerInstance,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.FirstByteTimeout,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// load is the fleet-wide in-flight count the threshold compares with.
func (in *instance) load() int { return int(in.inFlight.Load() + in.remote.Load()) }

func (in *instance) rate() float64 { return math.Float64frombits(in.prefillRate.Load()) }

// predictTTFT is the queue estimate plus the uncached tokens at the learned prefill rate.
func (in *instance) predictTTFT(uncachedTokens int) time.Duration {
	rate := in.rate()
	queued := float64(in.backlogTokens.Load()) + float64(in.waiting.Load())*math.Float64frombits(in.uncachedEWMA.Load())
	return time.Duration((queued + float64(uncachedTokens)) / rate * float64(time.Second))
}

// learnPrefill folds one observation (tokens prefilled ahead of and for the request, and
// its time to first token) into the prefill rate. Observations too small to carry signal
// are ignored; the rate stays within 1/100..100× the prior.
func (in *instance) learnPrefill(tokens int, ttft time.Duration, prior float64) {
	if tokens < 256 || ttft <= 0 {
		return
	}
	sample := float64(tokens) / ttft.Seconds()
	sample = min(max(sample, prior/100), prior*100)
	for {
		old := in.prefillRate.Load()
		next := 0.8*math.Float64frombits(old) + 0.2*sample
		if in.prefillRate.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

func (in *instance) learnUncached(tokens int) {
	for {
		old := in.uncachedEWMA.Load()
		next := 0.9*math.Float64frombits(old) + 0.1*float64(tokens)
		if in.uncachedEWMA.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// fleet is an immutable snapshot of the known instances, rebuilt on every change.
type fleet struct {
	list    []*instance // sorted by id
	byID    map[string]*instance
	byModel map[string][]*instance
}

func buildFleet(list []*instance) *fleet {
	slices.SortFunc(list, func(a, b *instance) int { return strings.Compare(a.id, b.id) })
	f := &fleet{list: list, byID: make(map[string]*instance, len(list)), byModel: map[string][]*instance{}}
	for _, in := range list {
		f.byID[in.id] = in
		d := in.desc.Load()
		if d == nil || d.model == "" {
			continue
		}
		f.byModel[d.model] = append(f.byModel[d.model], in)
		for _, a := range d.adapters {
			if a != d.model {
				f.byModel[a] = append(f.byModel[a], in)
			}
		}
	}
	return f
}
