package sim

import (
	"fmt"
	"strings"
	"time"
)

// DefaultModel is the model a Server serves by default: the embedded tokenizer's model.
const DefaultModel = "Qwen/Qwen3-0.6B"

// Event wire forms.
const (
	FormatMap   = "map"   // events as msgpack maps with a "type" key (vLLM ≥ v0.24)
	FormatArray = "array" // legacy positional arrays (vLLM ≤ v0.23)
)

// CostModel gives a scheduler step's duration in simulated time:
//
//	StepBase + PerPrefillToken·prefill tokens + PerDecodeSeq·decoding sequences
//	         + PerContextToken·context tokens attended (every scheduled sequence's length)
type CostModel struct {
	StepBase        time.Duration
	PerPrefillToken time.Duration
	PerDecodeSeq    time.Duration
	PerContextToken time.Duration
}

// Step returns the duration of one step.
func (c CostModel) Step(prefillTokens, decodeSeqs, contextTokens int) time.Duration {
	return c.StepBase + time.Duration(prefillTokens)*c.PerPrefillToken +
		time.Duration(decodeSeqs)*c.PerDecodeSeq + time.Duration(contextTokens)*c.PerContextToken
}

// Config configures a Server. Start from DefaultConfig (or a profile's Apply) and
// override fields; Validate reports the first problem.
type Config struct {
	// ListenAddr is the HTTP address, HOST:PORT; port 0 picks a free port (URL reads it back).
	ListenAddr string
	// Model is the served base model name; LoRAAdapters are extra names a request may use
	// as its model (each changes the block hashes like a vLLM LoRA adapter).
	Model        string
	LoRAAdapters []string
	// Profile names the profile the engine settings came from (informational).
	Profile string

	// BlockSize is the KV-cache block size in tokens; NumGPUBlocks the capacity in blocks.
	BlockSize    int
	NumGPUBlocks int
	// MaxNumSeqs bounds the running requests; MaxNumBatchedTokens is the per-step token
	// budget (prefill is chunked to fit it); MaxModelLen bounds prompt + max_tokens.
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	MaxModelLen         int
	Cost                CostModel
	// TimeScale multiplies every sleep: 1 = real time, 0.05 = 20× faster, 0 = no sleep
	// at all (bookkeeping speed). Simulated times (usage, metrics) are unscaled.
	TimeScale float64

	// DefaultMaxTokens is the output length of a request without max_tokens.
	DefaultMaxTokens int
	// OutputLenUniform draws each request's output length uniformly from [1, max_tokens]
	// instead of generating exactly max_tokens tokens.
	OutputLenUniform bool
	// Seed seeds the random choices (output lengths, fault draws); 0 = time-based.
	Seed int64

	// KVEventsEnabled turns the ZMQ publisher on.
	KVEventsEnabled bool
	// KVEventsEndpoint is the PUB endpoint. Like vLLM, the sim binds when it contains
	// "*", "::", "ipc://" or "inproc://" and connects otherwise; a "*" port picks a free
	// port (EventsEndpoint reads it back).
	KVEventsEndpoint string
	// KVEventsReplayEndpoint is the replay ROUTER endpoint (always bound); "" = no replay.
	KVEventsReplayEndpoint string
	// KVEventsTopic is the first frame of every message.
	KVEventsTopic string
	// KVEventsFormat is FormatMap or FormatArray.
	KVEventsFormat string
	// KVEventsBufferSteps is how many batches the replay buffer keeps.
	KVEventsBufferSteps int
	// KVEventsHWM is the PUB high-water mark in messages (past it, batches are dropped
	// silently, as ZMQ does); 0 = unbounded.
	KVEventsHWM int
	// DataParallelRank is written into every batch.
	DataParallelRank int

	// HashSeed seeds the engine's block hashes like PYTHONHASHSEED: "" = a random
	// NONE_HASH per process (and per restart), as vLLM without PYTHONHASHSEED.
	HashSeed string
	// MaxRequestBytes bounds a request body.
	MaxRequestBytes int64
	// Faults are the faults active from the start.
	Faults Faults
}

// DefaultConfig returns the `tiny` profile on ephemeral local ports, suited to running
// several servers in one process. The CLI uses vLLM's ports instead.
func DefaultConfig() Config {
	cfg := Config{
		ListenAddr:             "127.0.0.1:0",
		Model:                  DefaultModel,
		TimeScale:              1,
		DefaultMaxTokens:       16,
		KVEventsEnabled:        true,
		KVEventsEndpoint:       "tcp://127.0.0.1:*",
		KVEventsReplayEndpoint: "tcp://127.0.0.1:*",
		KVEventsTopic:          "kv",
		KVEventsFormat:         FormatMap,
		KVEventsBufferSteps:    10000,
		KVEventsHWM:            100000,
		MaxRequestBytes:        32 << 20,
	}
	profiles["tiny"].Apply(&cfg)
	return cfg
}

// Validate checks the config.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.ListenAddr == "":
		return bad("ListenAddr is empty")
	case strings.TrimSpace(c.Model) == "":
		return bad("Model is empty")
	case c.BlockSize <= 0 || c.BlockSize > 4096:
		return bad("BlockSize %d: want 1..4096 tokens", c.BlockSize)
	case c.NumGPUBlocks <= 0:
		return bad("NumGPUBlocks %d: want > 0", c.NumGPUBlocks)
	case c.MaxNumSeqs <= 0:
		return bad("MaxNumSeqs %d: want > 0", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens <= 0:
		return bad("MaxNumBatchedTokens %d: want > 0", c.MaxNumBatchedTokens)
	case c.MaxModelLen <= 0:
		return bad("MaxModelLen %d: want > 0", c.MaxModelLen)
	case c.Cost.StepBase < 0 || c.Cost.PerPrefillToken < 0 || c.Cost.PerDecodeSeq < 0 || c.Cost.PerContextToken < 0:
		return bad("cost model durations must be ≥ 0")
	case c.TimeScale < 0:
		return bad("TimeScale %v: want ≥ 0", c.TimeScale)
	case c.DefaultMaxTokens <= 0:
		return bad("DefaultMaxTokens %d: want > 0", c.DefaultMaxTokens)
	case c.KVEventsBufferSteps < 0:
		return bad("KVEventsBufferSteps %d: want ≥ 0", c.KVEventsBufferSteps)
	case c.KVEventsHWM < 0:
		return bad("KVEventsHWM %d: want ≥ 0", c.KVEventsHWM)
	case c.MaxRequestBytes <= 0:
		return bad("MaxRequestBytes %d: want > 0", c.MaxRequestBytes)
	case c.DataParallelRank < 0:
		return bad("DataParallelRank %d: want ≥ 0", c.DataParallelRank)
	}
	if c.KVEventsFormat != FormatMap && c.KVEventsFormat != FormatArray {
		return bad("KVEventsFormat %q: want %q or %q", c.KVEventsFormat, FormatMap, FormatArray)
	}
	if c.KVEventsEnabled {
		if err := checkEndpoint(c.KVEventsEndpoint); err != nil {
			return bad("KVEventsEndpoint: %v", err)
		}
		if !bindEndpoint(c.KVEventsEndpoint) && strings.HasSuffix(c.KVEventsEndpoint, ":0") {
			return bad("KVEventsEndpoint %q: without '*' the sim connects (like vLLM), and port 0 cannot be dialed; use tcp://HOST:* to bind a free port", c.KVEventsEndpoint)
		}
		if c.KVEventsReplayEndpoint != "" {
			if err := checkEndpoint(c.KVEventsReplayEndpoint); err != nil {
				return bad("KVEventsReplayEndpoint: %v", err)
			}
		}
	}
	seen := map[string]bool{c.Model: true}
	for _, a := range c.LoRAAdapters {
		if strings.TrimSpace(a) == "" {
			return bad("LoRAAdapters holds an empty name")
		}
		if seen[a] {
			return bad("LoRAAdapters: %q repeats a served name", a)
		}
		seen[a] = true
	}
	if err := c.Faults.validate(); err != nil {
		return err
	}
	return nil
}

// checkEndpoint accepts tcp://HOST:PORT (PORT may be "*"), ipc://PATH and inproc://NAME.
func checkEndpoint(ep string) error {
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok || rest == "" {
		return fmt.Errorf("%q: want tcp://HOST:PORT", ep)
	}
	switch scheme {
	case "tcp":
		i := strings.LastIndexByte(rest, ':')
		if i < 0 || i == len(rest)-1 {
			return fmt.Errorf("%q: want tcp://HOST:PORT", ep)
		}
	case "ipc", "inproc":
	default:
		return fmt.Errorf("%q: unsupported transport %q", ep, scheme)
	}
	return nil
}

// bindEndpoint reports whether vLLM would bind (rather than connect) the endpoint.
func bindEndpoint(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") ||
		strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}
