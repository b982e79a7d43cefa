package sim

// noBlock marks the end of a free-queue link or an absent block.
const noBlock int32 = -1

// block is one KV-cache block of the pool.
type block struct {
	ref        int32
	prev, next int32 // free-queue links
	dupNext    int32 // next cached block with the same digest
	inFree     bool
	cached     bool
	digest     digest
	key        uint64 // kvblock key of the prefix ending with this block (test oracle)
}

// pool is vLLM v1's block pool: a fixed number of blocks, a free queue ordered by
// eviction priority (least recently freed at the head; a request's blocks are freed
// tail first, so its last blocks are evicted first), and a map from block digest to the
// cached blocks holding it. A cached block with no references stays cached in the free
// queue until it is popped for reuse, which evicts it (BlockRemoved). Like vLLM, two
// blocks may cache the same digest (two requests computed it concurrently); both are
// announced and removed separately.
//
// Not safe for concurrent use; the engine's lock guards it.
type pool struct {
	blocks     []block
	head, tail int32
	numFree    int
	numCached  int
	cached     map[digest]int32
	ev         *eventBuf
	evictions  uint64
}

func newPool(n int, ev *eventBuf) *pool {
	p := &pool{blocks: make([]block, n), ev: ev}
	p.wipe()
	return p
}

// wipe returns the pool to its initial state without emitting events.
func (p *pool) wipe() {
	p.head, p.tail, p.numFree, p.numCached, p.evictions = noBlock, noBlock, 0, 0, 0
	p.cached = make(map[digest]int32, len(p.blocks))
	for i := range p.blocks {
		p.blocks[i] = block{prev: noBlock, next: noBlock, dupNext: noBlock}
		p.pushTail(int32(i))
	}
}

func (p *pool) pushTail(id int32) {
	b := &p.blocks[id]
	b.prev, b.next, b.inFree = p.tail, noBlock, true
	if p.tail == noBlock {
		p.head = id
	} else {
		p.blocks[p.tail].next = id
	}
	p.tail = id
	p.numFree++
}

func (p *pool) unlink(id int32) {
	b := &p.blocks[id]
	if b.prev == noBlock {
		p.head = b.next
	} else {
		p.blocks[b.prev].next = b.next
	}
	if b.next == noBlock {
		p.tail = b.prev
	} else {
		p.blocks[b.next].prev = b.prev
	}
	b.prev, b.next, b.inFree = noBlock, noBlock, false
	p.numFree--
}

// lookup returns a cached block holding d, or noBlock.
func (p *pool) lookup(d *digest) int32 {
	if id, ok := p.cached[*d]; ok {
		return id
	}
	return noBlock
}

// touch takes a reference on a cached block found by lookup, taking it off the free
// queue if nobody held it.
func (p *pool) touch(id int32) {
	b := &p.blocks[id]
	if b.inFree {
		p.unlink(id)
	}
	b.ref++
}

// allocate pops the least recently freed block, evicting its cached content (a
// BlockRemoved event), and returns it with one reference. The caller checks numFree.
func (p *pool) allocate() int32 {
	id := p.head
	if id == noBlock {
		panic("sim: allocate from an empty free queue")
	}
	p.unlink(id)
	b := &p.blocks[id]
	if b.cached {
		p.uncache(id)
		p.evictions++
		p.ev.removed(b.digest.wire())
	}
	b.ref = 1
	return id
}

// uncache removes id from the digest map.
func (p *pool) uncache(id int32) {
	b := &p.blocks[id]
	head := p.cached[b.digest]
	if head == id {
		if b.dupNext == noBlock {
			delete(p.cached, b.digest)
		} else {
			p.cached[b.digest] = b.dupNext
		}
	} else {
		for cur := head; cur != noBlock; cur = p.blocks[cur].dupNext {
			if p.blocks[cur].dupNext == id {
				p.blocks[cur].dupNext = b.dupNext
				break
			}
		}
	}
	b.cached, b.dupNext, b.key = false, noBlock, 0
	p.numCached--
}

// commit marks a computed full block as cached under d (the caller emits BlockStored).
func (p *pool) commit(id int32, d *digest, key uint64) {
	b := &p.blocks[id]
	b.digest, b.key, b.cached = *d, key, true
	if head, ok := p.cached[*d]; ok {
		b.dupNext = head
	} else {
		b.dupNext = noBlock
	}
	p.cached[*d] = id
	p.numCached++
}

// release drops one reference; a block nobody holds goes to the tail of the free queue.
func (p *pool) release(id int32) {
	b := &p.blocks[id]
	b.ref--
	if b.ref == 0 {
		p.pushTail(id)
	}
}

// usage is the fraction of blocks in use (vLLM's kv_cache_usage_perc: 1 − free/total,
// where free counts cached blocks nobody holds).
func (p *pool) usage() float64 {
	return 1 - float64(p.numFree)/float64(len(p.blocks))
}

// resetCache drops every cached block, as vLLM's reset_prefix_cache does. Like vLLM it
// refuses while any block is in use; it reports whether it reset.
func (p *pool) resetCache() bool {
	if p.numFree != len(p.blocks) {
		return false
	}
	for id := range p.blocks {
		b := &p.blocks[id]
		b.cached, b.dupNext, b.key = false, noBlock, 0
	}
	clear(p.cached)
	p.numCached = 0
	p.ev.cleared()
	return true
}

// keys appends the kvblock key of every cached block to dst.
func (p *pool) keys(dst []uint64) []uint64 {
	for id := range p.blocks {
		if b := &p.blocks[id]; b.cached {
			dst = append(dst, b.key)
		}
	}
	return dst
}
