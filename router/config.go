package router

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// Policy names accepted by Config.Policy.
const (
	PolicyKVAware      = "kv-aware"
	PolicyPrefixHash   = "prefix-hash"
	PolicyLeastRequest = "least-request"
	PolicyRandom       = "random"
)

// Tokenizer modes accepted by Config.TokenizerMode.
const (
	TokenizerLocal  = "local"
	TokenizerEngine = "engine"
	TokenizerNone   = "none"
)

// Config configures a Router. Durations and sizes carry their unit in the field name.
type Config struct {
	// ListenAddr is the HTTP address Start binds, e.g. ":8080" or "127.0.0.1:0" (tests).
	// Empty: Start binds nothing and the caller serves Handler() itself.
	ListenAddr string
	// MetricsPath mounts the registry's handler on Handler() when the injected registry is
	// also a prometheus.Gatherer; empty to mount it elsewhere.
	MetricsPath string
	// RouterID names this replica on NATS (kvroute.v1.inflight.<id>); default host-pid.
	RouterID string

	// Policy: kv-aware (default), prefix-hash (SageMaker PREFIX_AWARE), least-request, random.
	Policy string
	// Engines, when set, is a static list of engine base URLs: no discovery over NATS, the
	// router scrapes each engine's /metrics and /v1/models itself.
	Engines []string
	// TokenizerMode: local (Deps.Tokenizer), engine (each instance's /tokenize) or none
	// (no cache-hit policy; affinity on the canonical prompt text).
	TokenizerMode string

	// GroupHeader names the routing-group header; the body's prompt_cache_key is the fallback.
	GroupHeader string
	// PrefixLengthChars: characters of the canonical prompt hashed for affinity (SageMaker
	// PrefixLength, 1024..65536 there; any positive value here).
	PrefixLengthChars int
	// PrefixLengthBytes: bytes of the raw body hashed for affinity on /invocations.
	PrefixLengthBytes int
	// ConcurrencyThreshold: in-flight requests (fleet-wide) at which an instance stops
	// being preferred and the request overflows (1..1024, SageMaker's range).
	ConcurrencyThreshold int
	// HardInFlightLimit: in-flight requests at which an instance takes nothing more; when
	// every candidate is there the client gets 429. 0 = no hard limit.
	HardInFlightLimit int
	// MinMatchTokens: a cached prefix shorter than this is not a cache hit.
	MinMatchTokens int

	// PendingTTL: how long a decision's keys count as held by the chosen instance before
	// the index confirms them. PendingConfirmGrace: once the engine answered, how long the
	// index gets to show the keys before the pending entries are dropped anyway.
	PendingTTL          time.Duration
	PendingConfirmGrace time.Duration
	// PendingMaxKeys bounds the overlay (rounded up to a power of two).
	PendingMaxKeys int

	// MaxBodyBytes: larger request bodies get 413.
	MaxBodyBytes int64
	// BodyReadTimeout: a client that has not sent its whole body by then gets 408.
	BodyReadTimeout time.Duration
	// Upstream timeouts: TCP connect, response headers (first byte), whole request.
	ConnectTimeout   time.Duration
	FirstByteTimeout time.Duration
	TotalTimeout     time.Duration
	// MaxIdleConnsPerInstance sizes each instance's keep-alive pool.
	MaxIdleConnsPerInstance int

	// Active health checks: GET HealthPath on every instance each HealthInterval.
	HealthPath     string
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// Passive ejection: EjectFailures failures within EjectWindow eject an instance for
	// EjectCooldown.
	EjectFailures int
	EjectWindow   time.Duration
	EjectCooldown time.Duration

	// InFlightPublishInterval: how often this replica publishes its in-flight counts
	// (≤ 250 ms); another replica's counts older than InFlightStaleAfter are ignored.
	InFlightPublishInterval time.Duration
	InFlightStaleAfter      time.Duration
	// InstanceRefreshInterval: how often the candidate list is rebuilt from the index.
	InstanceRefreshInterval time.Duration
	// ScrapeInterval: static mode's /metrics and /v1/models polling period.
	ScrapeInterval time.Duration

	// PrefillPriorTokensPerSecond is the prefill rate assumed for an instance before its
	// first measured time to first token.
	PrefillPriorTokensPerSecond float64

	// DebugHeaders adds X-Kvroute-Instance and X-Kvroute-Decision to responses.
	DebugHeaders bool

	// PrewarmPrefixes: when an instance newly appears (discovery), replay this many of the
	// hottest prefixes the router has routed to it, as token-id completions with
	// max_tokens=1, before it takes real traffic. 0 = off (the default).
	PrewarmPrefixes int
	// PrewarmTimeout bounds one newcomer's whole pre-warming; it joins when it passes.
	PrewarmTimeout time.Duration
	// PrewarmConcurrency: replays in flight at once per newcomer.
	PrewarmConcurrency int
	// PrewarmMaxTokens: the longest prefix kept and replayed, in tokens (longer prompts
	// are cut to it). Memory: 4 × PrewarmPrefixes tracked prefixes × 4 bytes a token.
	PrewarmMaxTokens int
	// PrewarmHalfLife: a request counts half as much toward a prefix's heat after this long.
	PrewarmHalfLife time.Duration
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		MetricsPath:                 "/metrics",
		Policy:                      PolicyKVAware,
		TokenizerMode:               TokenizerLocal,
		GroupHeader:                 "X-Prefix-Aware-Id",
		PrefixLengthChars:           1024,
		PrefixLengthBytes:           1024,
		ConcurrencyThreshold:        32,
		MinMatchTokens:              64,
		PendingTTL:                  2 * time.Second,
		PendingConfirmGrace:         500 * time.Millisecond,
		PendingMaxKeys:              1 << 18,
		MaxBodyBytes:                32 << 20,
		BodyReadTimeout:             30 * time.Second,
		ConnectTimeout:              2 * time.Second,
		FirstByteTimeout:            5 * time.Minute,
		TotalTimeout:                30 * time.Minute,
		MaxIdleConnsPerInstance:     512,
		HealthPath:                  "/health",
		HealthInterval:              2 * time.Second,
		HealthTimeout:               time.Second,
		EjectFailures:               3,
		EjectWindow:                 10 * time.Second,
		EjectCooldown:               15 * time.Second,
		InFlightPublishInterval:     200 * time.Millisecond,
		InFlightStaleAfter:          time.Second,
		InstanceRefreshInterval:     250 * time.Millisecond,
		ScrapeInterval:              time.Second,
		PrefillPriorTokensPerSecond: 20000,
		PrewarmTimeout:              10 * time.Second,
		PrewarmConcurrency:          4,
		PrewarmMaxTokens:            8192,
		PrewarmHalfLife:             5 * time.Minute,
	}
}

// Validate reports the first invalid field; it fills RouterID when empty.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	switch c.Policy {
	case PolicyKVAware, PolicyPrefixHash, PolicyLeastRequest, PolicyRandom:
	default:
		return bad("policy %q: want kv-aware, prefix-hash, least-request or random", c.Policy)
	}
	switch c.TokenizerMode {
	case TokenizerLocal, TokenizerEngine, TokenizerNone:
	default:
		return bad("tokenizer %q: want local, engine or none", c.TokenizerMode)
	}
	for _, e := range c.Engines {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("engine %q: want an http(s) base URL", e)
		}
	}
	if c.GroupHeader == "" {
		return bad("group header must not be empty")
	}
	if c.PrefixLengthChars <= 0 || c.PrefixLengthBytes <= 0 {
		return bad("prefix lengths must be positive")
	}
	if c.ConcurrencyThreshold < 1 || c.ConcurrencyThreshold > 1024 {
		return bad("concurrency threshold %d: want 1..1024", c.ConcurrencyThreshold)
	}
	if c.HardInFlightLimit < 0 || (c.HardInFlightLimit > 0 && c.HardInFlightLimit < c.ConcurrencyThreshold) {
		return bad("hard in-flight limit %d: want 0 (none) or ≥ the concurrency threshold", c.HardInFlightLimit)
	}
	if c.MinMatchTokens < 0 {
		return bad("min match tokens must not be negative")
	}
	if c.PendingTTL < 0 || c.PendingConfirmGrace < 0 {
		return bad("pending durations must not be negative")
	}
	if c.PendingMaxKeys < 1 {
		return bad("pending max keys must be positive")
	}
	if c.MaxBodyBytes < 1 {
		return bad("max body bytes must be positive")
	}
	for name, d := range map[string]time.Duration{
		"connect timeout": c.ConnectTimeout, "first-byte timeout": c.FirstByteTimeout, "total timeout": c.TotalTimeout,
		"health interval": c.HealthInterval, "health timeout": c.HealthTimeout, "eject window": c.EjectWindow,
		"eject cooldown": c.EjectCooldown, "in-flight publish interval": c.InFlightPublishInterval,
		"in-flight stale after": c.InFlightStaleAfter, "instance refresh interval": c.InstanceRefreshInterval,
		"scrape interval": c.ScrapeInterval, "body read timeout": c.BodyReadTimeout,
	} {
		if d <= 0 {
			return bad("%s must be positive", name)
		}
	}
	if c.InFlightPublishInterval > 250*time.Millisecond {
		return bad("in-flight publish interval %v: at most 250ms", c.InFlightPublishInterval)
	}
	if c.EjectFailures < 1 {
		return bad("eject failures must be ≥ 1")
	}
	if c.MaxIdleConnsPerInstance < 1 {
		return bad("max idle conns per instance must be ≥ 1")
	}
	if c.PrefillPriorTokensPerSecond <= 0 {
		return bad("prefill prior must be positive")
	}
	if c.HealthPath == "" || !strings.HasPrefix(c.HealthPath, "/") {
		return bad("health path %q must start with /", c.HealthPath)
	}
	if c.PrewarmPrefixes < 0 || c.PrewarmPrefixes > maxPrewarmPrefixes {
		return bad("prewarm prefixes %d: want 0 (off) .. %d", c.PrewarmPrefixes, maxPrewarmPrefixes)
	}
	if c.PrewarmPrefixes > 0 {
		switch {
		case c.PrewarmTimeout <= 0:
			return bad("prewarm timeout must be positive")
		case c.PrewarmConcurrency < 1:
			return bad("prewarm concurrency must be ≥ 1")
		case c.PrewarmMaxTokens < hotBlock:
			return bad("prewarm max tokens %d: want ≥ %d", c.PrewarmMaxTokens, hotBlock)
		case c.PrewarmHalfLife <= 0:
			return bad("prewarm half-life must be positive")
		}
	}
	if c.RouterID == "" {
		host, _ := os.Hostname()
		c.RouterID = kvroutev1.SanitizeID(fmt.Sprintf("%s-%d", host, os.Getpid()))
	}
	if err := kvroutev1.ValidateID(c.RouterID); err != nil {
		return bad("router id: %v", err)
	}
	return nil
}
