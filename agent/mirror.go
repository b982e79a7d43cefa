package agent

import (
	"slices"

	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// SkipReason says why a stored block got no key.
type SkipReason uint8

// Reasons a block is not mirrored.
const (
	// SkipMedium: the event is about a non-GPU tier (CPU offload, disk).
	SkipMedium SkipReason = iota
	// SkipGroup: the event is about a non-main KV-cache group (hybrid models).
	SkipGroup
	// SkipMultimodal: the block's extra_keys carry multimodal identifiers, or it descends
	// from such a block: its tokens alone do not identify its content.
	SkipMultimodal
	// SkipOrphan: the block's parent is unknown, or it descends from an orphan.
	SkipOrphan
	// SkipMalformed: token_ids do not hold exactly blocks × block_size tokens.
	SkipMalformed
	numSkipReasons
)

var skipReasonNames = [numSkipReasons]string{"medium", "group", "multimodal", "orphan", "malformed"}

// String returns the metric label of the reason.
func (r SkipReason) String() string { return skipReasonNames[r] }

// entryKey identifies one engine block: reference counts are kept per data-parallel
// rank, KV-cache group and engine hash, since vLLM may store and remove a hash twice.
type entryKey struct {
	rank  int32
	group int32
	hash  uint64
}

// entry is what the mirror knows about one engine block.
type entry struct {
	key    uint64 // kvblock key; 0 when hidden
	refs   int32
	hidden bool // no key: orphan, multimodal or malformed, or a descendant of one
}

type seedKey struct{ lora, salt string }

// change states in mirror.before.
const (
	wasAbsent  = 0
	wasPresent = 1
	emitted    = 2 // absent before, already listed in this flush's stored groups
)

// storedRun is one BlockStored's visible keys, in chain order, with its parent key.
type storedRun struct {
	parent     uint64
	start, end int // range in mirror.runKeys
}

// ApplyStats counts what one Apply did.
type ApplyStats struct {
	Events  [4]int // by EventKind
	Blocks  int    // stored blocks given a key
	Orphans int    // BlockStored events whose parent was unknown
	Skipped [numSkipReasons]int
	// UnknownRemovals counts removed hashes the mirror did not hold.
	UnknownRemovals int
}

// mirror is the agent's local index of its one engine: engine block → key with
// reference counts, the set of keys present, and the net change since the last flush.
// It does no I/O and is not safe for concurrent use.
type mirror struct {
	model     string
	baseSeed  uint64
	seeds     map[seedKey]uint64
	blockSize int

	entries map[entryKey]entry
	keys    map[uint64]int32 // key → number of visible entries holding it

	// Net change since the last flush.
	cleared bool
	before  map[uint64]uint8
	runs    []storedRun
	runKeys []uint64
}

func newMirror(model string, blockSize int) *mirror {
	return &mirror{
		model:     model,
		baseSeed:  kvblock.Seed(model, "", ""),
		seeds:     make(map[seedKey]uint64),
		blockSize: blockSize,
		entries:   make(map[entryKey]entry),
		keys:      make(map[uint64]int32),
		before:    make(map[uint64]uint8),
	}
}

func (m *mirror) seed(lora, salt string) uint64 {
	if lora == "" && salt == "" {
		return m.baseSeed
	}
	k := seedKey{lora, salt}
	if s, ok := m.seeds[k]; ok {
		return s
	}
	if len(m.seeds) >= maxInterned {
		clear(m.seeds)
	}
	s := kvblock.Seed(m.model, lora, salt)
	m.seeds[k] = s
	return s
}

// reset drops everything (a new epoch or an engine-wide clear) and records a clear.
func (m *mirror) reset() {
	clear(m.entries)
	clear(m.keys)
	clear(m.before)
	m.runs = m.runs[:0]
	m.runKeys = m.runKeys[:0]
	m.cleared = true
}

// Apply applies one decoded batch from data-parallel rank rank and returns what it did.
func (m *mirror) Apply(b *Batch, rank int32, st *ApplyStats) {
	for i := range b.Events {
		e := &b.Events[i]
		st.Events[e.Kind]++
		switch e.Kind {
		case KindBlockStored:
			m.stored(e, rank, st)
		case KindBlockRemoved:
			m.removed(e, rank, st)
		case KindAllBlocksCleared:
			m.reset()
		}
	}
}

func (m *mirror) stored(e *Event, rank int32, st *ApplyStats) {
	n := len(e.Hashes)
	if e.Medium != MediumGPU {
		st.Skipped[SkipMedium] += n
		return
	}
	if e.Group != 0 {
		st.Skipped[SkipGroup] += n
		return
	}
	bs := e.BlockSize
	if bs <= 0 {
		bs = m.blockSize
	} else if bs != m.blockSize {
		m.blockSize = bs
	}
	var parent uint64
	hidden, reason := false, SkipOrphan
	if e.HasParent && e.Parent != 0 {
		pe, ok := m.entries[entryKey{rank, 0, e.Parent}]
		switch {
		case !ok:
			st.Orphans++
			hidden = true
		case pe.hidden:
			hidden = true
		default:
			parent = pe.key
		}
	} else {
		parent = m.seed(e.LoRAName, e.Salt)
	}
	if !hidden && len(e.Tokens) != n*bs {
		hidden, reason = true, SkipMalformed
	}
	run := storedRun{parent: parent, start: len(m.runKeys)}
	for i, h := range e.Hashes {
		if !hidden && e.ExtraFrom >= 0 && i >= e.ExtraFrom {
			hidden, reason = true, SkipMultimodal
		}
		ek := entryKey{rank, 0, h}
		if old, ok := m.entries[ek]; ok {
			// vLLM does not de-duplicate: the same block stored again.
			old.refs++
			m.entries[ek] = old
			if !hidden && !old.hidden {
				parent = old.key
				m.runKeys = append(m.runKeys, old.key)
			} else if !hidden {
				hidden, reason = true, SkipOrphan
			}
			continue
		}
		if hidden {
			m.entries[ek] = entry{refs: 1, hidden: true}
			st.Skipped[reason]++
			continue
		}
		key := kvblock.Extend(parent, e.Tokens[i*bs:(i+1)*bs])
		parent = key
		m.entries[ek] = entry{key: key, refs: 1}
		m.addKey(key)
		m.runKeys = append(m.runKeys, key)
		st.Blocks++
	}
	if run.end = len(m.runKeys); run.end > run.start {
		m.runs = append(m.runs, run)
	}
}

func (m *mirror) removed(e *Event, rank int32, st *ApplyStats) {
	if e.Medium != MediumGPU || e.Group != 0 {
		return
	}
	for _, h := range e.Hashes {
		ek := entryKey{rank, 0, h}
		old, ok := m.entries[ek]
		if !ok {
			st.UnknownRemovals++
			continue
		}
		if old.refs--; old.refs > 0 {
			m.entries[ek] = old
			continue
		}
		delete(m.entries, ek)
		if !old.hidden {
			m.dropKey(old.key)
		}
	}
}

func (m *mirror) addKey(key uint64) {
	n := m.keys[key]
	if n == 0 {
		if _, ok := m.before[key]; !ok {
			m.before[key] = wasAbsent
		}
	}
	m.keys[key] = n + 1
}

func (m *mirror) dropKey(key uint64) {
	n := m.keys[key]
	if n > 1 {
		m.keys[key] = n - 1
		return
	}
	delete(m.keys, key)
	if _, ok := m.before[key]; !ok {
		m.before[key] = wasPresent
	}
}

// pending reports whether a flush would publish anything.
func (m *mirror) pending() bool { return m.cleared || len(m.before) > 0 }

// flush writes the net change since the last flush into out (reusing its slices and
// the Stored messages in pool) and starts a new change window. Stored lists the keys
// that became present, grouped in chain order with their parent keys; Removed the keys
// that were present and are gone; a key never appears in both. It reports whether out
// carries anything.
func (m *mirror) flush(out *kvroutev1.EventBatch, pool *[]*kvroutev1.Stored) bool {
	out.Stored = out.Stored[:0]
	out.Removed = out.Removed[:0]
	out.Cleared = m.cleared
	out.BlockSize = uint32(m.blockSize)
	if !m.pending() {
		return false
	}
	var cur *kvroutev1.Stored
	for _, r := range m.runs {
		cur = nil
		prev := r.parent
		for _, k := range m.runKeys[r.start:r.end] {
			state, changed := m.before[k]
			_, present := m.keys[k]
			if changed && state == wasAbsent && present {
				m.before[k] = emitted
				if cur == nil {
					cur = nextStored(out, pool)
					cur.ParentKey = prev
				}
				cur.Keys = append(cur.Keys, k)
			} else {
				cur = nil
			}
			prev = k
		}
	}
	for k, state := range m.before {
		if state == wasPresent {
			if _, present := m.keys[k]; !present {
				out.Removed = append(out.Removed, k)
			}
		}
	}
	clear(m.before)
	m.runs = m.runs[:0]
	m.runKeys = m.runKeys[:0]
	m.cleared = false
	return out.Cleared || len(out.Stored) > 0 || len(out.Removed) > 0
}

// nextStored returns a reset Stored message appended to out, reused from pool.
func nextStored(out *kvroutev1.EventBatch, pool *[]*kvroutev1.Stored) *kvroutev1.Stored {
	i := len(out.Stored)
	if i == len(*pool) {
		*pool = append(*pool, &kvroutev1.Stored{})
	}
	s := (*pool)[i]
	s.ParentKey, s.Keys, s.Medium = 0, s.Keys[:0], kvroutev1.Medium_MEDIUM_GPU
	out.Stored = append(out.Stored, s)
	return s
}

// appendKeys appends every key present to dst.
func (m *mirror) appendKeys(dst []uint64) []uint64 {
	for k := range m.keys {
		dst = append(dst, k)
	}
	return dst
}

// sortedKeys returns the keys present, sorted.
func (m *mirror) sortedKeys() []uint64 {
	ks := m.appendKeys(make([]uint64, 0, len(m.keys)))
	slices.Sort(ks)
	return ks
}
