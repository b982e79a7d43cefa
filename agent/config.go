package agent

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// Config configures an Agent. Durations carry their unit in the field name.
type Config struct {
	// EngineURL is the base URL of the engine's HTTP server (e.g. http://10.0.0.7:8000):
	// /v1/models gives the model and adapters, /metrics the load.
	EngineURL string
	// ZMQEndpoint is the engine's KV-events PUB endpoint, e.g. tcp://10.0.0.7:5557.
	ZMQEndpoint string
	// ZMQBind makes the agent bind ZMQEndpoint (the engine connects) instead of dialling it.
	ZMQBind bool
	// ReplayEndpoint is the engine's replay ROUTER endpoint; empty disables replay.
	ReplayEndpoint string
	// Topic is the ZMQ subscription prefix ("" = every topic).
	Topic string
	// DPRank keeps only batches from this data-parallel rank; -1 accepts every rank.
	DPRank int
	// InstanceID names the instance on NATS; default: derived from EngineURL's host:port.
	InstanceID string
	// Model is the served base model; default: read from the engine's /v1/models.
	Model string
	// BlockSize is the engine's block size in tokens until an event says otherwise.
	BlockSize int
	// HeartbeatInterval is the period of heartbeats (and of /metrics scrapes).
	HeartbeatInterval time.Duration
	// ModelsRefreshInterval is how often the adapter list is re-read from /v1/models.
	ModelsRefreshInterval time.Duration
	// EngineTimeout bounds each HTTP request to the engine.
	EngineTimeout time.Duration
	// ReplayTimeout bounds the wait for each reply message of a replay.
	ReplayTimeout time.Duration
	// MinResyncInterval is the least time between two orphan-triggered resyncs.
	MinResyncInterval time.Duration
	// CoalesceWindow is the longest the agent folds queued engine batches into one
	// published batch (≤ 5 ms keeps the index fresh); 0 publishes one per engine batch.
	CoalesceWindow time.Duration
	// MaxCoalesce caps the engine batches folded into one published batch.
	MaxCoalesce int
	// SnapshotChunkKeys is the default number of keys per snapshot chunk; it is lowered
	// when needed to keep every chunk under the NATS server's max payload.
	SnapshotChunkKeys int
	// FrameQueue is the number of received ZMQ messages buffered between the socket
	// reader and the processing loop.
	FrameQueue int
	// AgentVersion is reported in the heartbeat's descriptor.
	AgentVersion string
}

// DefaultConfig returns the defaults; EngineURL and ZMQEndpoint must still be set.
func DefaultConfig() Config {
	return Config{
		DPRank:                -1,
		BlockSize:             kvblock.DefaultBlockSize,
		HeartbeatInterval:     time.Second,
		ModelsRefreshInterval: 30 * time.Second,
		EngineTimeout:         2 * time.Second,
		ReplayTimeout:         2 * time.Second,
		MinResyncInterval:     5 * time.Second,
		CoalesceWindow:        5 * time.Millisecond,
		MaxCoalesce:           256,
		SnapshotChunkKeys:     65536,
		FrameQueue:            1024,
		AgentVersion:          "dev",
	}
}

// Validate reports the first problem of c, wrapping ErrConfig.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	if c.EngineURL == "" {
		return bad("engine URL is required")
	}
	u, err := url.Parse(c.EngineURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("engine URL %q: want http(s)://host:port", c.EngineURL)
	}
	if err := checkEndpoint(c.ZMQEndpoint); err != nil {
		return bad("zmq endpoint: %v", err)
	}
	if c.ReplayEndpoint != "" {
		if err := checkEndpoint(c.ReplayEndpoint); err != nil {
			return bad("replay endpoint: %v", err)
		}
	}
	if c.InstanceID != "" {
		if err := kvroutev1.ValidateID(c.InstanceID); err != nil {
			return bad("instance id: %v", err)
		}
	}
	switch {
	case c.DPRank < -1:
		return bad("dp rank %d: want -1 (any) or ≥ 0", c.DPRank)
	case c.BlockSize <= 0:
		return bad("block size %d: want > 0", c.BlockSize)
	case c.HeartbeatInterval <= 0:
		return bad("heartbeat interval %v: want > 0", c.HeartbeatInterval)
	case c.ModelsRefreshInterval <= 0:
		return bad("models refresh interval %v: want > 0", c.ModelsRefreshInterval)
	case c.EngineTimeout <= 0:
		return bad("engine timeout %v: want > 0", c.EngineTimeout)
	case c.ReplayTimeout <= 0:
		return bad("replay timeout %v: want > 0", c.ReplayTimeout)
	case c.MinResyncInterval < 0:
		return bad("min resync interval %v: want ≥ 0", c.MinResyncInterval)
	case c.CoalesceWindow < 0 || c.CoalesceWindow > 5*time.Millisecond:
		return bad("coalesce window %v: want 0..5ms", c.CoalesceWindow)
	case c.MaxCoalesce <= 0:
		return bad("max coalesce %d: want > 0", c.MaxCoalesce)
	case c.SnapshotChunkKeys <= 0:
		return bad("snapshot chunk keys %d: want > 0", c.SnapshotChunkKeys)
	case c.FrameQueue <= 0:
		return bad("frame queue %d: want > 0", c.FrameQueue)
	}
	return nil
}

func checkEndpoint(ep string) error {
	if ep == "" {
		return fmt.Errorf("required")
	}
	for _, p := range []string{"tcp://", "ipc://", "inproc://"} {
		if strings.HasPrefix(ep, p) && len(ep) > len(p) {
			return nil
		}
	}
	return fmt.Errorf("%q: want tcp://host:port, ipc://path or inproc://name", ep)
}

// instanceID returns c.InstanceID or the id derived from the engine URL's host:port.
func (c Config) instanceID() string {
	if c.InstanceID != "" {
		return c.InstanceID
	}
	if u, err := url.Parse(c.EngineURL); err == nil && u.Host != "" {
		return kvroutev1.SanitizeID(u.Host)
	}
	return kvroutev1.SanitizeID(c.EngineURL)
}
