package router

import (
	"math/bits"
	"sync"
)

// pendingProbe is how many slots a key may occupy away from its home slot.
const pendingProbe = 8

// pendingEntry says that key counts as held by instance slot inst until expires.
type pendingEntry struct {
	key     uint64
	expires int64 // unix nanoseconds; 0 = empty
	inst    uint32
}

// pending is the overlay of keys the router just sent to an instance, counted as held
// there until the index shows them or they expire. It is a fixed open-addressed table:
// bounded memory, no allocation after construction; when the few slots a key may use are
// all live, the entry closest to expiry is overwritten (the overlay is a hint, losing an
// entry only weakens one prediction).
type pending struct {
	mu    sync.RWMutex
	slots []pendingEntry
	mask  uint64
}

func newPending(maxKeys int) *pending {
	n := 1 << bits.Len(uint(max(maxKeys, pendingProbe)-1))
	return &pending{slots: make([]pendingEntry, n), mask: uint64(n - 1)}
}

func (p *pending) home(key uint64, inst uint32) uint64 {
	h := key ^ (uint64(inst)+1)*0x9e3779b97f4a7c15
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return h & p.mask
}

// add marks keys as held by inst until expires.
func (p *pending) add(keys []uint64, inst uint32, expires, now int64) {
	p.mu.Lock()
	for _, k := range keys {
		h := p.home(k, inst)
		same, free, victim, victimExp := -1, -1, -1, int64(0)
		for i := uint64(0); i < pendingProbe; i++ {
			j := int((h + i) & p.mask)
			e := &p.slots[j]
			if e.key == k && e.inst == inst {
				same = j
				break
			}
			if e.expires <= now {
				if free < 0 {
					free = j
				}
			} else if victim < 0 || e.expires < victimExp {
				victim, victimExp = j, e.expires
			}
		}
		if same >= 0 {
			victim = same
		} else if free >= 0 {
			victim = free
		}
		p.slots[victim] = pendingEntry{key: k, inst: inst, expires: expires}
	}
	p.mu.Unlock()
}

// expireBy moves the expiry of inst's live entries for keys to at most t.
func (p *pending) expireBy(keys []uint64, inst uint32, t, now int64) {
	p.mu.Lock()
	for _, k := range keys {
		if j := p.find(k, inst, now); j >= 0 && p.slots[j].expires > t {
			p.slots[j].expires = t
		}
	}
	p.mu.Unlock()
}

// run returns how many of keys, in order from the first, are live for inst at now.
func (p *pending) run(keys []uint64, inst uint32, now int64) int {
	p.mu.RLock()
	n := 0
	for _, k := range keys {
		if p.find(k, inst, now) < 0 {
			break
		}
		n++
	}
	p.mu.RUnlock()
	return n
}

func (p *pending) find(key uint64, inst uint32, now int64) int {
	h := p.home(key, inst)
	for i := uint64(0); i < pendingProbe; i++ {
		j := int((h + i) & p.mask)
		e := &p.slots[j]
		if e.key == key && e.inst == inst && e.expires > now {
			return j
		}
	}
	return -1
}

// live counts the live entries (for Stats; O(table size)).
func (p *pending) live(now int64) int {
	p.mu.RLock()
	n := 0
	for i := range p.slots {
		if p.slots[i].expires > now {
			n++
		}
	}
	p.mu.RUnlock()
	return n
}
