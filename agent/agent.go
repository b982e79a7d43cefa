package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// lastEpoch makes epochs strictly increasing within the process, even for several
// agents started in the same nanosecond.
var lastEpoch atomic.Uint64

// nextEpoch returns a new epoch: the current unix-nanosecond time, or one more than the
// last epoch handed out if the clock has not moved past it.
func nextEpoch() uint64 {
	for {
		old := lastEpoch.Load()
		e := max(uint64(time.Now().UnixNano()), old+1)
		if lastEpoch.CompareAndSwap(old, e) {
			return e
		}
	}
}

// Agent mirrors one engine's prefix cache as kvblock keys and publishes it on NATS.
type Agent struct {
	cfg     Config
	nc      *nats.Conn
	log     *slog.Logger
	met     *metrics
	id      string
	eng     *engineClient
	started time.Time
	running atomic.Bool
	live    atomic.Uint64 // live engine batches decoded (readiness probe for tests and tools)
	sub     *subscriber
	frames  chan [][]byte

	// mu guards the mirror and the published position; the processing goroutine is the
	// only writer, the snapshot handler, heartbeats and Keys read under it.
	mu         sync.Mutex
	mir        *mirror
	epoch      uint64
	seq        uint64 // last published seq of epoch
	engSeq     uint64 // last engine seq folded into the mirror
	newestTime float64
	out        kvroutev1.EventBatch
	pool       []*kvroutev1.Stored
	buf        []byte

	// Sequence state, owned by the processing goroutine.
	haveSeq       bool   // engSeq is meaningful
	haveLive      bool   // lastLive is meaningful
	lastLive      uint64 // highest seq seen on the live stream
	complete      bool   // the epoch's mirror saw the engine's whole history
	lastResync    time.Time
	resyncPending bool
	dec, rdec     *Decoder
	batch, rbatch Batch

	infoMu   sync.Mutex
	model    string
	adapters []string
	load     *kvroutev1.Load
}

// New checks cfg and builds an Agent that publishes on nc and registers its metrics on
// reg (nil: not registered). It does no I/O; Run starts the work.
func New(cfg Config, nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrConfig)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	met, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	id := cfg.instanceID()
	frames := make(chan [][]byte, cfg.FrameQueue)
	return &Agent{
		frames: frames,
		sub: &subscriber{endpoint: cfg.ZMQEndpoint, bind: cfg.ZMQBind, topic: cfg.Topic, log: log,
			out: frames, ready: make(chan struct{})},
		cfg:     cfg,
		nc:      nc,
		log:     log.With("instance", id),
		met:     met,
		id:      id,
		eng:     newEngineClient(cfg.EngineURL, cfg.EngineTimeout),
		started: time.Now(),
		dec:     NewDecoder(),
		rdec:    NewDecoder(),
		model:   cfg.Model,
		load:    &kvroutev1.Load{},
	}, nil
}

// ID returns the instance id the agent publishes under.
func (a *Agent) ID() string { return a.id }

// Keys returns the keys of the agent's mirror, sorted (a test oracle).
func (a *Agent) Keys() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mir == nil {
		return nil
	}
	return a.mir.sortedKeys()
}

// Epoch returns the current epoch and the last published seq in it.
func (a *Agent) Epoch() (epoch, seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch, a.seq
}

// ZMQAddr returns the address the SUB socket is bound to (bind mode, once bound), e.g.
// tcp://127.0.0.1:41234, so an engine can be pointed at a port chosen by the OS.
func (a *Agent) ZMQAddr() string {
	if p := a.sub.bound.Load(); p != nil {
		return *p
	}
	return ""
}

// Run resolves the engine's model (waiting for the engine if needed), announces a new
// epoch, then mirrors and publishes until ctx is done. It returns nil on cancellation.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return ErrClosed
	}
	if err := a.resolveModel(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	a.mir = newMirror(a.model, a.cfg.BlockSize)
	a.startEpochLocked(false)
	a.flushLocked()
	a.mu.Unlock()

	snap, err := a.nc.Subscribe(kvroutev1.SubjectSnapshot+a.id, a.onSnapshot)
	if err != nil {
		return fmt.Errorf("agent: subscribe snapshots: %w", err)
	}
	defer func() { _ = snap.Unsubscribe() }()

	frames := a.frames
	var wg sync.WaitGroup
	wg.Go(func() { a.sub.run(ctx) })
	wg.Go(func() { a.heartbeatLoop(ctx) })
	defer wg.Wait()

	if a.cfg.ReplayEndpoint != "" {
		// Learn the engine's current cache from its replay buffer before the live stream.
		select {
		case <-a.sub.ready:
		case <-ctx.Done():
			return nil
		}
		a.replayHistory(ctx)
		a.flush()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-frames:
			a.onLive(ctx, f)
			a.coalesce(ctx, frames)
			a.flush()
			if a.resyncPending {
				a.resync(ctx, "orphan blocks")
				a.flush()
			}
		}
	}
}

// coalesce folds the engine batches already queued (up to MaxCoalesce, within
// CoalesceWindow) into the batch being built, without waiting for new ones.
func (a *Agent) coalesce(ctx context.Context, frames <-chan [][]byte) {
	if a.cfg.CoalesceWindow <= 0 {
		return
	}
	deadline := time.Now().Add(a.cfg.CoalesceWindow)
	for n := 1; n < a.cfg.MaxCoalesce && !a.resyncPending; n++ {
		select {
		case f := <-frames:
			a.onLive(ctx, f)
		default:
			return
		}
		if time.Now().After(deadline) {
			return
		}
	}
}

func (a *Agent) resolveModel(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		model, adapters, err := a.eng.models(ctx)
		if err == nil {
			a.infoMu.Lock()
			if a.model == "" {
				a.model = model
			}
			a.adapters = adapters
			a.infoMu.Unlock()
			return nil
		}
		if a.cfg.Model != "" {
			a.log.Warn("engine /v1/models unavailable; adapters unknown until it answers", "err", err)
			return nil
		}
		a.log.Warn("waiting for the engine's /v1/models", "err", err, "retry", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// onLive handles one live ZMQ message: frame layout, decode, then sequence tracking.
func (a *Agent) onLive(ctx context.Context, frames [][]byte) {
	seq, payload, err := splitLive(frames)
	if err == nil {
		err = a.dec.Decode(payload, &a.batch)
	}
	if err != nil {
		a.met.decodeErrors.Inc()
		a.log.Warn("engine message skipped", "err", err)
		return
	}
	a.met.batchesReceived.Inc()
	a.live.Add(1)
	switch {
	case a.haveLive && seq <= a.lastLive:
		// Backwards on the live stream: the engine restarted (vLLM sends no clear).
		a.log.Info("engine seq went backwards: engine restart", "seq", seq, "last", a.lastLive)
		a.lastLive = seq
		a.newEpoch()
		a.complete = seq <= 1
		if seq > 1 && a.cfg.ReplayEndpoint != "" {
			a.replayHistory(ctx)
		}
	case a.haveSeq && seq <= a.engSeq:
		a.lastLive, a.haveLive = seq, true
		return // already folded in from a replay
	case !a.haveSeq:
		a.lastLive, a.haveLive = seq, true
		if seq > 1 && a.cfg.ReplayEndpoint != "" {
			a.replayHistory(ctx)
		} else if !a.haveSeq {
			a.complete = a.complete || seq <= 1
		}
	case seq != a.engSeq+1:
		a.lastLive, a.haveLive = seq, true
		a.met.gaps.Inc()
		a.log.Info("engine seq gap", "want", a.engSeq+1, "got", seq)
		if !a.repairGap(ctx, seq) {
			a.resync(ctx, "lost engine batches")
		}
	default:
		a.lastLive, a.haveLive = seq, true
	}
	if !a.haveSeq || seq > a.engSeq {
		a.apply(seq, &a.batch)
	}
}

// apply folds one batch into the mirror.
func (a *Agent) apply(seq uint64, b *Batch) {
	var st ApplyStats
	a.mu.Lock()
	if a.cfg.DPRank < 0 || !b.HasDPRank || b.DPRank == a.cfg.DPRank {
		a.mir.Apply(b, int32(b.DPRank), &st)
	}
	a.engSeq, a.haveSeq = seq, true
	if b.Time > 0 {
		a.newestTime = b.Time
	}
	a.mu.Unlock()
	a.met.observe(&st)
	if st.Orphans > 0 {
		a.log.Warn("orphan blocks: parent unknown", "events", st.Orphans, "seq", seq, "complete_history", a.complete)
		if a.complete && time.Since(a.lastResync) >= a.cfg.MinResyncInterval {
			a.resyncPending = true
		}
	}
}

// repairGap replays the missing batches before seq; it reports whether every one of
// them was recovered.
func (a *Agent) repairGap(ctx context.Context, seq uint64) bool {
	if a.cfg.ReplayEndpoint == "" {
		return false
	}
	start := a.engSeq + 1
	first, ok, hole, err := a.replay(ctx, start)
	if err != nil {
		a.log.Warn("replay failed", "from", start, "err", err)
		return false
	}
	if !ok || first > start || hole || a.engSeq+1 < seq {
		a.log.Warn("replay could not fill the gap: history lost", "from", start, "first_replayed", first, "upto", a.engSeq)
		return false
	}
	return true
}

// replayHistory replays the engine's whole replay buffer into a mirror that has no
// position yet (a new epoch), and records whether it covered the engine's history.
func (a *Agent) replayHistory(ctx context.Context) {
	first, ok, hole, err := a.replay(ctx, 0)
	switch {
	case err != nil:
		a.log.Warn("history replay failed", "err", err)
		a.complete = false
	case !ok:
		// An empty buffer: the engine has published nothing yet.
		a.complete = true
	default:
		a.complete = first <= 1 && !hole
	}
}

// replay applies the replayed batches after the current position, in order; hole
// reports a seq jump inside the replay (after which nothing more is applied).
func (a *Agent) replay(ctx context.Context, start uint64) (first uint64, ok, hole bool, err error) {
	a.met.replays.Inc()
	applied := 0
	first, ok, err = replayFrom(ctx, a.cfg.ReplayEndpoint, start, a.cfg.ReplayTimeout, a.log, func(seq uint64, payload []byte) {
		if hole {
			return
		}
		if err := a.rdec.Decode(payload, &a.rbatch); err != nil {
			a.met.decodeErrors.Inc()
			a.log.Warn("replayed batch skipped", "seq", seq, "err", err)
			return
		}
		a.met.batchesReceived.Inc()
		if a.haveSeq && seq <= a.engSeq {
			return
		}
		if a.haveSeq && seq != a.engSeq+1 {
			hole = true
			return
		}
		a.apply(seq, &a.rbatch)
		if applied++; applied%a.cfg.MaxCoalesce == 0 {
			a.flush()
		}
	})
	return first, ok, hole, err
}

// resync starts a new epoch and relearns what it can: the replay buffer when there is
// one, then the live stream.
func (a *Agent) resync(ctx context.Context, reason string) {
	a.log.Warn("resync: new epoch", "reason", reason)
	a.newEpoch()
	a.complete = false
	if a.cfg.ReplayEndpoint != "" {
		a.replayHistory(ctx)
	}
}

// newEpoch drops the mirror and the engine position and starts a new epoch.
func (a *Agent) newEpoch() {
	a.mu.Lock()
	a.startEpochLocked(true)
	a.mu.Unlock()
	a.haveSeq = false
	a.resyncPending = false
	a.lastResync = time.Now()
}

func (a *Agent) startEpochLocked(count bool) {
	a.mir.reset()
	a.epoch = nextEpoch()
	a.seq = 0
	a.engSeq = 0
	if count {
		a.met.resyncs.Inc()
	}
}

func (a *Agent) flush() {
	a.mu.Lock()
	a.flushLocked()
	a.mu.Unlock()
}

// flushLocked publishes the mirror's net change since the last flush, if any.
func (a *Agent) flushLocked() {
	if !a.mir.flush(&a.out, &a.pool) {
		a.met.keysHeld.Set(float64(a.mir.numKeys()))
		return
	}
	start := time.Now()
	out := &a.out
	out.Instance = a.id
	out.Epoch = a.epoch
	out.EngineSeq = a.engSeq
	out.EngineTimeUnixNano = int64(a.newestTime * 1e9)
	maxKeys := a.maxKeysPerMsg()
	if n := len(out.Removed) + storedKeys(out.Stored); n > maxKeys {
		for _, piece := range splitBatch(out, maxKeys) {
			a.publishLocked(piece)
		}
	} else {
		a.publishLocked(out)
	}
	a.met.publishDuration.Observe(time.Since(start).Seconds())
	a.met.keysHeld.Set(float64(a.mir.numKeys()))
}

func (a *Agent) publishLocked(b *kvroutev1.EventBatch) {
	a.seq++
	b.Seq = a.seq
	b.SentAtUnixNano = time.Now().UnixNano()
	var err error
	a.buf, err = protoMarshal(a.buf[:0], b)
	if err == nil {
		err = a.nc.Publish(kvroutev1.SubjectEvents+a.id, a.buf)
	}
	if err != nil {
		// The seq is spent: the index sees the gap and asks for a snapshot.
		a.met.publishErrors.Inc()
		a.log.Warn("publish failed", "seq", b.Seq, "err", err)
		return
	}
	a.met.batchesPublished.Inc()
}

// maxKeysPerMsg is how many fixed64 keys fit in one NATS message with room to spare.
func (a *Agent) maxKeysPerMsg() int {
	mp := a.nc.MaxPayload()
	if mp <= 0 {
		mp = 1 << 20
	}
	return max(int(mp-4096)/10, 1)
}

func storedKeys(s []*kvroutev1.Stored) int {
	n := 0
	for _, st := range s {
		n += len(st.Keys)
	}
	return n
}

// splitBatch cuts a batch too large for one NATS message into pieces of at most maxKeys
// keys: the first piece keeps cleared, removals come before stores, and a split Stored
// run continues with the parent key of its last key so far.
func splitBatch(b *kvroutev1.EventBatch, maxKeys int) []*kvroutev1.EventBatch {
	var pieces []*kvroutev1.EventBatch
	cur := &kvroutev1.EventBatch{Cleared: b.Cleared}
	room := maxKeys
	next := func() {
		pieces = append(pieces, cur)
		cur, room = &kvroutev1.EventBatch{}, maxKeys
	}
	for rem := b.Removed; len(rem) > 0; {
		if room == 0 {
			next()
		}
		n := min(room, len(rem))
		cur.Removed = append(cur.Removed, rem[:n]...)
		rem, room = rem[n:], room-n
	}
	for _, s := range b.Stored {
		parent, keys := s.ParentKey, s.Keys
		for len(keys) > 0 {
			if room == 0 {
				next()
			}
			n := min(room, len(keys))
			cur.Stored = append(cur.Stored, &kvroutev1.Stored{ParentKey: parent, Keys: append([]uint64(nil), keys[:n]...), Medium: s.Medium})
			parent, keys, room = keys[n-1], keys[n:], room-n
		}
	}
	pieces = append(pieces, cur)
	for _, p := range pieces {
		p.Instance, p.Epoch, p.BlockSize = b.Instance, b.Epoch, b.BlockSize
		p.EngineSeq, p.EngineTimeUnixNano = b.EngineSeq, b.EngineTimeUnixNano
	}
	return pieces
}

var errNotStarted = errors.New("agent: not started")
