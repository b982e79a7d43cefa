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

// entry is what the mirror knows about one engine block. Entries are kept per
// data-parallel rank, keyed by engine hash (of KV-cache group 0, the only group
// mirrored), with reference counts, since vLLM may store and remove a hash twice.
type entry struct {
	key    uint64 // kvblock key; 0 when hidden
	refs   int32
	hidden bool // no key: orphan, multimodal or malformed, or a descendant of one
}

type seedKey struct{ lora, salt string }

// keyState is what the mirror knows about one key: how many visible entries hold it,
// and its part in the current change window.
type keyState struct {
	refs int32 // 0: absent (kept only until the next flush, to remember it changed)
	win  uint8 // winUntouched, or winAbsent/winPresent (state before the window) | winEmitted
}

// Change-window states of a key (keyState.win).
const (
	winUntouched = 0
	winAbsent    = 1 // absent when the window opened
	winPresent   = 2 // present when the window opened
	winEmitted   = 4 // already listed in this flush's stored groups
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

	ranks    map[int32]*table[entry] // per data-parallel rank: engine hash → entry
	lastRank int32
	lastTab  *table[entry]
	keys     table[keyState]
	present  int // keys with refs > 0

	// Net change since the last flush.
	cleared bool
	dirty   []uint64 // keys whose win left winUntouched in this window
	runs    []storedRun
	runKeys []uint64
}

func newMirror(model string, blockSize int) *mirror {
	return &mirror{
		model:     model,
		baseSeed:  kvblock.Seed(model, "", ""),
		seeds:     make(map[seedKey]uint64),
		blockSize: blockSize,
		ranks:     make(map[int32]*table[entry]),
	}
}

// entries returns the entry table of a data-parallel rank.
func (m *mirror) entries(rank int32) *table[entry] {
	if m.lastTab != nil && m.lastRank == rank {
		return m.lastTab
	}
	t := m.ranks[rank]
	if t == nil {
		t = &table[entry]{}
		m.ranks[rank] = t
	}
	m.lastRank, m.lastTab = rank, t
	return t
}

// numKeys returns the number of keys present.
func (m *mirror) numKeys() int { return m.present }

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
	for _, t := range m.ranks {
		t.reset()
	}
	m.keys.reset()
	m.present = 0
	m.dirty = m.dirty[:0]
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
	entries := m.entries(rank)
	if e.HasParent && e.Parent != 0 {
		pe := entries.get(e.Parent)
		switch {
		case pe == nil:
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
		ent, existed := entries.upsert(h)
		if existed {
			// vLLM does not de-duplicate: the same block stored again.
			ent.refs++
			if !hidden && !ent.hidden {
				parent = ent.key
				m.runKeys = append(m.runKeys, ent.key)
			} else if !hidden {
				hidden, reason = true, SkipOrphan
			}
			continue
		}
		if hidden {
			*ent = entry{refs: 1, hidden: true}
			st.Skipped[reason]++
			continue
		}
		key := kvblock.Extend(parent, e.Tokens[i*bs:(i+1)*bs])
		parent = key
		*ent = entry{key: key, refs: 1}
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
	entries := m.entries(rank)
	for _, h := range e.Hashes {
		ent := entries.get(h)
		if ent == nil {
			st.UnknownRemovals++
			continue
		}
		if ent.refs--; ent.refs > 0 {
			continue
		}
		old := *ent
		entries.del(h)
		if !old.hidden {
			m.dropKey(old.key)
		}
	}
}

func (m *mirror) addKey(key uint64) {
	ks, _ := m.keys.upsert(key)
	if ks.refs == 0 {
		m.present++
		if ks.win == winUntouched {
			ks.win = winAbsent
			m.dirty = append(m.dirty, key)
		}
	}
	ks.refs++
}

func (m *mirror) dropKey(key uint64) {
	ks := m.keys.get(key)
	if ks == nil || ks.refs == 0 {
		return
	}
	if ks.refs--; ks.refs > 0 {
		return
	}
	m.present--
	if ks.win == winUntouched {
		ks.win = winPresent
		m.dirty = append(m.dirty, key)
	}
	// Absent keys stay in the table until the flush, which needs their window state.
}

// pending reports whether a flush would publish anything.
func (m *mirror) pending() bool { return m.cleared || len(m.dirty) > 0 }

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
			ks := m.keys.get(k)
			if ks != nil && ks.win == winAbsent && ks.refs > 0 {
				ks.win |= winEmitted
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
	for _, k := range m.dirty {
		ks := m.keys.get(k)
		if ks == nil {
			continue
		}
		if ks.win == winPresent && ks.refs == 0 {
			out.Removed = append(out.Removed, k)
		}
		if ks.refs == 0 {
			m.keys.del(k)
		} else {
			ks.win = winUntouched
		}
	}
	m.dirty = m.dirty[:0]
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
	m.keys.each(func(k uint64, ks *keyState) {
		if ks.refs > 0 {
			dst = append(dst, k)
		}
	})
	return dst
}

// sortedKeys returns the keys present, sorted.
func (m *mirror) sortedKeys() []uint64 {
	ks := m.appendKeys(make([]uint64, 0, m.present))
	slices.Sort(ks)
	return ks
}
