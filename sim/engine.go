package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kvroute/kvroute/kvblock"
)

// request is one generation request inside the engine. Fields above mu belong to the
// engine (guarded by engine.mu); the output fields below mu are shared with the HTTP
// handler that waits on ch.
type request struct {
	id         string
	tokens     []uint32 // prompt, then the generated tokens
	numPrompt  int
	maxOut     int
	lora, salt string
	seed       uint64 // kvblock seed (model, adapter, salt)

	gen          uint64   // engine hash generation the digests belong to
	digests      []digest // per full block, computed lazily
	keys         []uint64 // kvblock key per full block, parallel to digests
	blocks       []int32
	numComputed  int // tokens whose KV is in the cache
	numCommitted int // leading blocks of blocks known to be cached
	schedN       int // tokens scheduled in the current step
	admitted     bool
	cancelled    bool
	arrivalSim   time.Duration
	arrivalWall  time.Time
	genOut       int // tokens generated so far

	mu     sync.Mutex
	ch     chan struct{} // signalled (non-blocking) whenever the output fields change
	out    int           // tokens generated, as the handler may read them
	cached int           // prompt tokens served from the prefix cache (first admission)
	done   bool
	err    error
	ttft   time.Duration // simulated
	ttftW  time.Duration // wall
	e2e    time.Duration // simulated, arrival to last token
}

func (r *request) numTokens() int { return len(r.tokens) }

// snapshot is what a handler reads of a request's progress.
type snapshot struct {
	out, cached int
	done        bool
	err         error
	ttft, ttftW time.Duration
	e2e         time.Duration
}

func (r *request) snapshot() snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return snapshot{out: r.out, cached: r.cached, done: r.done, err: r.err, ttft: r.ttft, ttftW: r.ttftW, e2e: r.e2e}
}

func (r *request) signal() {
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// stepStats is what the cost model needs to know about a step.
type stepStats struct {
	prefillTokens, decodeSeqs, contextTokens int
}

// engine is the scheduler and the KV cache. One goroutine (run) drives the steps; every
// other access takes mu.
type engine struct {
	cfg    Config
	log    logger
	m      *metrics
	pub    *publisher // nil when events are off
	filler []uint32

	mu       sync.Mutex
	pool     *pool
	ev       eventBuf
	hasher   hasher
	none     digest
	gen      uint64
	waiting  []*request
	running  []*request
	sched    []*request
	hitIDs   []int32
	faults   Faults
	rng      *rand.Rand
	batchBuf []byte

	// simulated clock
	simNow        time.Duration
	busy          bool
	idleSince     time.Time
	stepStartWall time.Time
	stepStartSim  time.Duration
	stepDur       time.Duration

	wake chan struct{}
}

// logger is the subset of *slog.Logger the engine uses.
type logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}

func newEngine(cfg Config, m *metrics, pub *publisher, log logger, filler []uint32) (*engine, error) {
	none, err := noneHash(cfg.HashSeed)
	if err != nil {
		return nil, err
	}
	seed := uint64(cfg.Seed)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	e := &engine{
		cfg: cfg, log: log, m: m, pub: pub, filler: filler,
		none: none, faults: cfg.Faults,
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		idleSince: time.Now(),
		wake:      make(chan struct{}, 1),
	}
	e.pool = newPool(cfg.NumGPUBlocks, &e.ev)
	return e, nil
}

// maxLen is the longest request (prompt + max_tokens) the engine accepts: the model
// length, or the whole KV cache if that is smaller.
func (e *engine) maxLen() int {
	return min(e.cfg.MaxModelLen, e.cfg.NumGPUBlocks*e.cfg.BlockSize)
}

// submit queues a request. It fails with ErrTooLong for one that can never fit.
func (e *engine) submit(r *request) error {
	if n := r.numPrompt + r.maxOut; n > e.maxLen() {
		return fmt.Errorf("%w: This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			ErrTooLong, e.maxLen(), n, r.numPrompt, r.maxOut)
	}
	now := time.Now()
	e.mu.Lock()
	if e.cfg.OutputLenUniform && r.maxOut > 1 {
		r.maxOut = 1 + e.rng.IntN(r.maxOut)
	}
	r.arrivalWall = now
	r.arrivalSim = e.simAt(now)
	r.gen = e.gen
	r.ch = make(chan struct{}, 1)
	e.waiting = append(e.waiting, r)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// cancel withdraws a request whose client went away; the next step frees its blocks.
func (e *engine) cancel(r *request) {
	e.mu.Lock()
	r.cancelled = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// simAt converts a wall time to simulated time. Call with mu held.
func (e *engine) simAt(wall time.Time) time.Duration {
	scale := e.cfg.TimeScale
	if !e.busy {
		if scale > 0 {
			return e.simNow + time.Duration(float64(wall.Sub(e.idleSince))/scale)
		}
		return e.simNow
	}
	if scale > 0 {
		d := min(time.Duration(float64(wall.Sub(e.stepStartWall))/scale), e.stepDur)
		return e.stepStartSim + max(d, 0)
	}
	return e.stepStartSim
}

// run drives the scheduler until ctx is done.
func (e *engine) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		e.mu.Lock()
		e.dropCancelled()
		if len(e.running) == 0 && len(e.waiting) == 0 {
			if e.busy {
				e.busy, e.idleSince = false, time.Now()
			}
			e.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
			continue
		}
		now := time.Now()
		if !e.busy {
			e.simNow = e.simAt(now)
			e.busy = true
		}
		st := e.schedule()
		dur := time.Duration(float64(e.cfg.Cost.Step(st.prefillTokens, st.decodeSeqs, st.contextTokens)) * e.faults.slow())
		e.stepStartWall, e.stepStartSim, e.stepDur = now, e.simNow, dur
		gen := e.gen
		e.mu.Unlock()

		if sleep := time.Duration(float64(dur) * e.cfg.TimeScale); sleep > 0 {
			timer.Reset(time.Until(now.Add(sleep)))
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}

		e.mu.Lock()
		if gen != e.gen { // restarted while the step ran: its requests are gone
			e.mu.Unlock()
			continue
		}
		e.simNow = e.stepStartSim + dur
		// Until the next step starts, an arrival happens at the end of this one.
		e.stepStartWall, e.stepStartSim, e.stepDur = time.Now(), e.simNow, 0
		e.m.stepDone(dur, len(e.sched))
		e.finishStep()
		e.flushEvents()
		sched := e.sched
		e.mu.Unlock()
		for _, r := range sched {
			r.signal()
		}
	}
}

// dropCancelled removes cancelled requests, freeing their blocks. Call with mu held.
func (e *engine) dropCancelled() {
	drop := func(q []*request) []*request {
		return slices.DeleteFunc(q, func(r *request) bool {
			if !r.cancelled {
				return false
			}
			e.freeBlocks(r)
			e.m.aborted()
			r.mu.Lock()
			r.done = true
			r.mu.Unlock()
			return true
		})
	}
	e.running = drop(e.running)
	e.waiting = drop(e.waiting)
}

// schedule builds one step like vLLM v1's scheduler: running requests first (each
// decodes one token or continues its chunked prefill; when blocks run out the newest
// running request is preempted and recomputed later), then waiting requests first come,
// first served while max-num-seqs and the token budget allow, each reusing its longest
// cached prefix. Blocks whose tokens are scheduled and full are committed to the cache
// (BlockStored), as vLLM does when it allocates their slots. Call with mu held.
func (e *engine) schedule() stepStats {
	var st stepStats
	budget := e.cfg.MaxNumBatchedTokens
	e.sched = e.sched[:0]
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.numTokens()-r.numComputed, budget)
		preempted := false
		for !e.allocSlots(r, r.numComputed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			if victim == r {
				preempted = true
				break
			}
		}
		if preempted {
			break
		}
		e.scheduleTokens(r, n, &st)
		budget -= n
	}
	B := e.cfg.BlockSize
	for budget > 0 && len(e.running) < e.cfg.MaxNumSeqs && len(e.waiting) > 0 {
		r := e.waiting[0]
		hits := e.lookupPrefix(r)
		computed := hits * B
		n := min(r.numTokens()-computed, budget)
		need := (computed+n+B-1)/B - hits
		held := 0
		for _, id := range e.hitIDs {
			if e.pool.blocks[id].ref == 0 {
				held++
			}
		}
		if need+held > e.pool.numFree {
			break // head-of-line: vLLM's FCFS waits for room
		}
		for _, id := range e.hitIDs {
			e.pool.touch(id)
		}
		r.blocks = append(r.blocks[:0], e.hitIDs...)
		r.numCommitted, r.numComputed = hits, computed
		if !e.allocSlots(r, computed+n) {
			panic("sim: allocation failed after the capacity check")
		}
		e.m.prefixQuery(r.numTokens(), computed)
		if !r.admitted {
			r.admitted = true
			r.mu.Lock()
			r.cached = computed
			r.mu.Unlock()
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, r)
		e.scheduleTokens(r, n, &st)
		budget -= n
	}
	return st
}

// lookupPrefix finds r's longest cached prefix, in blocks, into e.hitIDs. Like vLLM it
// leaves at least one token to compute, so a full hit still computes the last block.
func (e *engine) lookupPrefix(r *request) int {
	e.hitIDs = e.hitIDs[:0]
	maxBlocks := (r.numTokens() - 1) / e.cfg.BlockSize
	for i := 0; i < maxBlocks; i++ {
		e.ensureDigests(r, i+1)
		id := e.pool.lookup(&r.digests[i])
		if id == noBlock {
			break
		}
		e.hitIDs = append(e.hitIDs, id)
	}
	return len(e.hitIDs)
}

// ensureDigests computes the engine digests and kvblock keys of r's first n blocks.
func (e *engine) ensureDigests(r *request, n int) {
	if r.gen != e.gen {
		r.digests, r.keys, r.gen = r.digests[:0], r.keys[:0], e.gen
	}
	B := e.cfg.BlockSize
	for i := len(r.digests); i < n; i++ {
		toks := r.tokens[i*B : (i+1)*B]
		parent, parentKey := &e.none, r.seed
		if i > 0 {
			parent, parentKey = &r.digests[i-1], r.keys[i-1]
		}
		x := extraKeys(r.lora, r.salt, i == 0)
		r.digests = append(r.digests, e.hasher.block(parent, toks, x.slice()))
		r.keys = append(r.keys, kvblock.Extend(parentKey, toks))
	}
}

// allocSlots makes r hold enough blocks for total tokens; false if the pool lacks room.
func (e *engine) allocSlots(r *request, total int) bool {
	need := (total+e.cfg.BlockSize-1)/e.cfg.BlockSize - len(r.blocks)
	if need <= 0 {
		return true
	}
	if need > e.pool.numFree {
		return false
	}
	for range need {
		r.blocks = append(r.blocks, e.pool.allocate())
	}
	return true
}

// scheduleTokens computes n more of r's tokens in this step and commits the blocks
// they complete.
func (e *engine) scheduleTokens(r *request, n int, st *stepStats) {
	if r.genOut > 0 && n == 1 && r.numComputed == r.numTokens()-1 {
		st.decodeSeqs++
	} else {
		st.prefillTokens += n
	}
	r.numComputed += n
	r.schedN = n
	st.contextTokens += r.numComputed
	e.sched = append(e.sched, r)

	B := e.cfg.BlockSize
	full := r.numComputed / B
	if full <= r.numCommitted {
		return
	}
	e.ensureDigests(r, full)
	for j := r.numCommitted; j < full; j++ {
		if j == r.numCommitted {
			var parent uint64
			if j > 0 {
				parent = r.digests[j-1].wire()
			}
			salt := ""
			if j == 0 {
				salt = r.salt
			}
			e.ev.stored(parent, j > 0, r.lora, salt)
		}
		e.pool.commit(r.blocks[j], &r.digests[j], r.keys[j])
		e.ev.storedBlock(r.digests[j].wire(), r.tokens[j*B:(j+1)*B])
	}
	r.numCommitted = full
}

// preempt stops a running request and puts it back at the head of the waiting queue;
// like vLLM's recompute preemption it frees all its blocks and starts over (its cached
// blocks usually hit again).
func (e *engine) preempt(r *request) {
	e.freeBlocks(r)
	r.numComputed, r.numCommitted = 0, 0
	e.waiting = slices.Insert(e.waiting, 0, r)
	e.m.preempted()
}

// freeBlocks releases r's blocks, last block first, so that a request's tail blocks
// are evicted before its head (as vLLM orders them).
func (e *engine) freeBlocks(r *request) {
	for i := len(r.blocks) - 1; i >= 0; i-- {
		e.pool.release(r.blocks[i])
	}
	r.blocks = r.blocks[:0]
}

// finishStep samples one token for every scheduled request whose tokens are all
// computed, records first-token times, and retires finished requests. Call with mu held.
func (e *engine) finishStep() {
	now := time.Now()
	finished := false
	for _, r := range e.sched {
		if r.numComputed != r.numTokens() {
			continue // prefill chunk: no token yet
		}
		r.tokens = append(r.tokens, e.filler[r.genOut%len(e.filler)])
		r.genOut++
		r.mu.Lock()
		r.out = r.genOut
		if r.genOut == 1 {
			r.ttft = e.simNow - r.arrivalSim
			r.ttftW = now.Sub(r.arrivalWall)
			e.m.firstToken(r.ttft, r.ttftW)
		}
		done := r.genOut >= r.maxOut
		if done {
			r.done = true
			r.e2e = e.simNow - r.arrivalSim
		}
		r.mu.Unlock()
		if done {
			e.freeBlocks(r)
			e.m.finished(r.numPrompt, r.genOut, r.e2e)
			finished = true
		}
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(r *request) bool { return r.genOut >= r.maxOut })
	}
}

// flushEvents publishes the step's events as one batch. Call with mu held.
func (e *engine) flushEvents() {
	if e.ev.empty() {
		return
	}
	if e.pub != nil {
		ts := float64(time.Now().UnixNano()) / 1e9
		e.batchBuf = encodeBatch(e.batchBuf[:0], ts, &e.ev, e.cfg.KVEventsFormat == FormatArray, e.cfg.BlockSize, e.cfg.DataParallelRank)
		e.pub.publish(e.batchBuf, &e.faults, e.rng)
	}
	e.ev.reset()
}

// resetPrefixCache drops every cached block (AllBlocksCleared), refusing while blocks
// are in use, as vLLM does.
func (e *engine) resetPrefixCache() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.pool.resetCache() {
		return false
	}
	e.flushEvents()
	return true
}

// failAll ends every request in flight with err. Call with mu held; signal the
// returned requests after unlocking.
func (e *engine) failAll(err error) []*request {
	var failed []*request
	for _, q := range [][]*request{e.running, e.waiting} {
		for _, r := range q {
			r.mu.Lock()
			r.done, r.err = true, err
			r.mu.Unlock()
			failed = append(failed, r)
		}
	}
	e.running, e.waiting, e.sched = nil, nil, nil
	return failed
}

// shutdown fails every request in flight (the server is closing).
func (e *engine) shutdown() {
	e.mu.Lock()
	failed := e.failAll(ErrClosed)
	e.gen++ // a step in progress must not deliver
	e.mu.Unlock()
	for _, r := range failed {
		r.signal()
	}
}

// restart simulates an engine process restart: every request in flight fails, the cache
// is wiped without any event, the event sequence restarts at 0, the metrics restart
// from zero and, without a hash seed, the block hashes change.
func (e *engine) restart() error {
	none, err := noneHash(e.cfg.HashSeed)
	if err != nil {
		return err
	}
	e.mu.Lock()
	failed := e.failAll(ErrRestarted)
	e.gen++
	e.none = none
	e.ev.reset()
	e.pool.wipe()
	e.m.reset() // a new process starts its counters from zero
	if e.pub != nil {
		e.pub.restart()
	}
	e.mu.Unlock()
	for _, r := range failed {
		r.signal()
	}
	e.log.Warn("engine restarted (fault injection)", "failed_requests", len(failed))
	return nil
}

// blockKeys returns the kvblock keys of every cached block, sorted and de-duplicated.
func (e *engine) blockKeys() []uint64 {
	e.mu.Lock()
	keys := e.pool.keys(make([]uint64, 0, e.pool.numCached))
	e.mu.Unlock()
	slices.Sort(keys)
	return slices.Compact(keys)
}

func (e *engine) setFaults(f Faults) {
	e.mu.Lock()
	e.faults = f
	e.mu.Unlock()
}

func (e *engine) getFaults() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.faults
}

// drawFail decides, under the fault settings, whether to fail a request (status) and
// whether to cut its stream.
func (e *engine) drawFaults() (failStatus int, cut bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.faults.FailFraction > 0 && e.rng.Float64() < e.faults.FailFraction {
		failStatus = e.faults.failStatus()
	}
	if e.faults.CutStreamFraction > 0 && e.rng.Float64() < e.faults.CutStreamFraction {
		cut = true
	}
	return failStatus, cut
}

// load reports the gauges vLLM exports.
func (e *engine) load() (running, waiting int, usage float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running), len(e.waiting), e.pool.usage()
}
