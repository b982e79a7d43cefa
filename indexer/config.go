package indexer

import (
	"fmt"
	"time"
)

// DefaultMaxKeys is the default --max-keys: about 40 bytes per key with one holder, so
// ~160 MB for a full index (see docs/benchmarks.md for the measured bytes per entry).
const DefaultMaxKeys = 4_000_000

// Config configures a Service.
type Config struct {
	// MaxKeys bounds the distinct keys held; least recently touched keys are evicted
	// beyond it. 0 = unbounded.
	MaxKeys int
	// MaxInstances bounds the instances tracked at once (1..MaxInstancesLimit).
	MaxInstances int
	// StaleAfter: no heartbeat for this long marks an instance stale (its keys still count).
	StaleAfter time.Duration
	// InstanceTTL: no heartbeat for this long removes the instance with its keys (gone).
	InstanceTTL time.Duration
	// GoneRetention keeps a gone instance visible in Instances() for this long.
	GoneRetention time.Duration
	// SnapshotTimeout bounds the wait for each snapshot chunk.
	SnapshotTimeout time.Duration
	// SnapshotRetryMin/Max bound the backoff between failed snapshot attempts.
	SnapshotRetryMin, SnapshotRetryMax time.Duration
	// SnapshotChunkKeys asks agents for at most this many keys per chunk (0 = their default).
	SnapshotChunkKeys uint32
	// MaxBufferedBatches caps the live batches buffered per instance while a snapshot is
	// in flight; beyond it the buffer is dropped and another snapshot follows.
	MaxBufferedBatches int
	// QueueLength is the ingestion queue (NATS messages); overflow drops messages, which
	// then show up as gaps and are repaired by snapshots.
	QueueLength int
	// WarmupWindow is the sliding window of the prefix-cache hit rates.
	WarmupWindow time.Duration
	// BlockSize is the tokens per block reported for lookups when no instance says.
	BlockSize int
	// Name identifies this index in snapshot requests (diagnostics).
	Name string
}

// DefaultConfig returns the defaults: agents heartbeat every second, so an instance is
// stale after 3 s and gone after 15 s.
func DefaultConfig() Config {
	return Config{
		MaxKeys:            DefaultMaxKeys,
		MaxInstances:       1024,
		StaleAfter:         3 * time.Second,
		InstanceTTL:        15 * time.Second,
		GoneRetention:      time.Minute,
		SnapshotTimeout:    5 * time.Second,
		SnapshotRetryMin:   250 * time.Millisecond,
		SnapshotRetryMax:   10 * time.Second,
		MaxBufferedBatches: 4096,
		QueueLength:        1 << 16,
		WarmupWindow:       time.Minute,
		BlockSize:          16,
		Name:               "kvroute-index",
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.MaxKeys < 0:
		return fmt.Errorf("%w: MaxKeys %d is negative", ErrConfig, c.MaxKeys)
	case c.MaxInstances < 1 || c.MaxInstances > MaxInstancesLimit:
		return fmt.Errorf("%w: MaxInstances %d not in 1..%d", ErrConfig, c.MaxInstances, MaxInstancesLimit)
	case c.StaleAfter <= 0:
		return fmt.Errorf("%w: StaleAfter %v must be positive", ErrConfig, c.StaleAfter)
	case c.InstanceTTL < c.StaleAfter:
		return fmt.Errorf("%w: InstanceTTL %v shorter than StaleAfter %v", ErrConfig, c.InstanceTTL, c.StaleAfter)
	case c.GoneRetention < 0:
		return fmt.Errorf("%w: GoneRetention %v is negative", ErrConfig, c.GoneRetention)
	case c.SnapshotTimeout <= 0:
		return fmt.Errorf("%w: SnapshotTimeout %v must be positive", ErrConfig, c.SnapshotTimeout)
	case c.SnapshotRetryMin <= 0 || c.SnapshotRetryMax < c.SnapshotRetryMin:
		return fmt.Errorf("%w: snapshot retry %v..%v invalid", ErrConfig, c.SnapshotRetryMin, c.SnapshotRetryMax)
	case c.MaxBufferedBatches < 1:
		return fmt.Errorf("%w: MaxBufferedBatches %d must be positive", ErrConfig, c.MaxBufferedBatches)
	case c.QueueLength < 1:
		return fmt.Errorf("%w: QueueLength %d must be positive", ErrConfig, c.QueueLength)
	case c.WarmupWindow <= 0:
		return fmt.Errorf("%w: WarmupWindow %v must be positive", ErrConfig, c.WarmupWindow)
	case c.BlockSize < 1:
		return fmt.Errorf("%w: BlockSize %d must be positive", ErrConfig, c.BlockSize)
	}
	return nil
}
