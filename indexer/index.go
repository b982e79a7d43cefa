package indexer

import (
	"errors"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// Errors of the package, wrapped with details where they occur.
var (
	ErrTooManyInstances = errors.New("indexer: too many instances")
	ErrBadInstance      = errors.New("indexer: invalid instance id")
	ErrBadBatch         = errors.New("indexer: invalid event batch")
	ErrConfig           = errors.New("indexer: invalid config")
	ErrClosed           = errors.New("indexer: closed")
	ErrSnapshot         = errors.New("indexer: snapshot failed")
	ErrNoTokenizer      = errors.New("indexer: no tokenizer configured")
	ErrUnknownInstance  = errors.New("indexer: unknown instance")
)

// Match is one instance's cached prefix for a looked-up key chain: Blocks is the number of
// consecutive leading keys (from keys[0] on) the instance holds.
type Match struct {
	Instance string
	Blocks   int
}

// IndexStats are the sizes and counters of an Index.
type IndexStats struct {
	// Keys is the number of distinct keys held by at least one instance.
	Keys int
	// Entries is the number of (key, instance) pairs.
	Entries int
	// Instances is the number of instances with an id in the index.
	Instances int
	// Evictions counts keys dropped by the MaxKeys bound since the index was made.
	Evictions uint64
	// MaxKeys is the bound (0 = none).
	MaxKeys int
}

// Index maps block keys to the set of instances that hold them.
//
// Behaviour:
//   - Store adds (key, instance) pairs and marks each key as most recently touched; Remove
//     drops pairs (unknown pairs are ignored); a key with no holder left is deleted.
//   - With a MaxKeys bound, adding a key beyond it first evicts the least recently touched
//     key with all of its holders (counted in IndexStats.Evictions). Lookups do not touch.
//   - RemoveInstance drops every key of an instance at once; the instance may be stored
//     again later and then starts empty.
//   - Apply applies one EventBatch in the order its proto defines: cleared (every key of
//     the instance is dropped), then removed, then stored. It does not check epoch or seq:
//     ordering is the caller's (Service's) job.
//   - Lookup appends one Match per instance holding at least keys[0], with the length of
//     its run of consecutive leading keys, best (longest) first. An instance removed with
//     RemoveInstance or Apply(cleared) is never returned for keys it held before.
//
// Thread safety: every method is safe for concurrent use; lookups run in parallel with
// each other and interleave with writers (a lookup sees each write wholly or not at all).
//
// Cost: Lookup is O(matched depth × holders of keys[0]): it probes at most about twice
// the matched depth plus 4 keys (never more than 32 past the end of the run), and is
// allocation-free when dst has room; Store/Remove are O(1) expected per key and allocation-free once the
// arena has grown; RemoveInstance is O(total keys), done in chunks that release the lock
// so lookups keep running; Blocks and Stats are O(1); InstanceKeys is O(total keys).
type Index interface {
	// Store marks keys as held by instance. It fails only for an invalid instance id or
	// when the index already has its maximum number of instances.
	Store(instance string, keys []uint64) error
	// Remove marks keys as no longer held by instance.
	Remove(instance string, keys []uint64)
	// RemoveInstance drops the instance and every key it holds.
	RemoveInstance(instance string)
	// Apply applies one batch (see the behaviour above).
	Apply(b *kvroutev1.EventBatch) error
	// Lookup appends to dst the matches of the key chain and returns the extended slice.
	Lookup(keys []uint64, dst []Match) []Match
	// Blocks returns how many keys instance holds (0 if unknown).
	Blocks(instance string) int
	// InstanceKeys appends every key instance holds, sorted, to dst (test oracle, tools).
	InstanceKeys(instance string, dst []uint64) []uint64
	// Stats returns sizes and counters.
	Stats() IndexStats
}
