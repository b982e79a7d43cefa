package indexer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// Service keeps an Index in step with the agents' NATS subjects. One goroutine owns every
// instance's ingestion state and applies its batches in (epoch, seq) order; snapshot
// requests run in goroutines of their own and hand their result back to it. Lookup,
// Instances and Subscribe are safe for concurrent use.
type Service struct {
	cfg  Config
	nc   *nats.Conn
	log  *slog.Logger
	base *BlockIndex
	idx  *Instrumented
	m    *serviceMetrics

	// Owned by the ingestion goroutine.
	insts map[string]*instance

	// view is what readers see, published by the ingestion goroutine.
	viewMu sync.RWMutex
	view   map[string]InstanceInfo

	subMu   sync.Mutex
	subs    map[int]func(InstanceEvent)
	nextSub int

	msgs   chan *nats.Msg
	snaps  chan snapshotResult
	natsub []*nats.Subscription

	gaps, snapshots atomic.Uint64

	startOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// instance is the ingestion state of one instance (owned by the ingestion goroutine).
type instance struct {
	id       string
	sync     State // StateJoining, StateSyncing or StateReady
	stale    bool
	gone     bool
	goneAt   time.Time
	epoch    uint64
	lastSeq  uint64
	desc     *kvroutev1.InstanceDescriptor
	load     *kvroutev1.Load
	joinedAt time.Time
	lastHB   time.Time
	lastUpd  time.Time
	// lag is a moving average of the ingestion lag: now − the engine time of each batch.
	lag time.Duration

	buffer     []*kvroutev1.EventBatch
	snapGen    uint64
	inFlight   bool
	nextSnapAt time.Time
	backoff    time.Duration
	behind     int

	hits   hitWindow
	warmup Warmup

	gaps, snapshots, applied uint64
}

func (in *instance) state() State {
	switch {
	case in.gone:
		return StateGone
	case in.stale:
		return StateStale
	}
	return in.sync
}

// New builds a Service; Start subscribes.
func New(cfg Config, nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrConfig)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, err := NewBlockIndex(BlockIndexConfig{MaxKeys: cfg.MaxKeys, MaxInstances: cfg.MaxInstances})
	if err != nil {
		return nil, err
	}
	idx, err := NewInstrumented(base, reg)
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg:   cfg,
		nc:    nc,
		log:   log,
		base:  base,
		idx:   idx,
		insts: map[string]*instance{},
		view:  map[string]InstanceInfo{},
		subs:  map[int]func(InstanceEvent){},
		msgs:  make(chan *nats.Msg, cfg.QueueLength),
		snaps: make(chan snapshotResult, 16),
		done:  make(chan struct{}),
	}
	m, err := newServiceMetrics(s, reg)
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

// Start subscribes to the events and heartbeat subjects and returns once the server has
// the subscriptions; ingestion runs until ctx ends or Close.
func (s *Service) Start(ctx context.Context) error {
	err := ErrClosed
	s.startOnce.Do(func() {
		err = s.start(ctx)
	})
	return err
}

func (s *Service) start(ctx context.Context) error {
	// Both subjects feed one channel from the connection's read loop, so an agent's
	// heartbeat is handled after the batches it published before it.
	for _, subj := range []string{kvroutev1.SubjectEvents + ">", kvroutev1.SubjectHeartbeat + ">"} {
		sub, err := s.nc.ChanSubscribe(subj, s.msgs)
		if err != nil {
			s.unsubscribe()
			return fmt.Errorf("indexer: subscribe %s: %w", subj, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		s.natsub = append(s.natsub, sub)
	}
	if err := s.nc.Flush(); err != nil {
		s.unsubscribe()
		return fmt.Errorf("indexer: subscribe: %w", err)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go s.run(ctx)
	return nil
}

func (s *Service) unsubscribe() {
	for _, sub := range s.natsub {
		_ = sub.Unsubscribe()
	}
	s.natsub = nil
}

// Close stops ingestion and unsubscribes. The index stays readable.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		started := false
		s.startOnce.Do(func() {}) // a later Start fails with ErrClosed
		if s.cancel != nil {
			started = true
			s.cancel()
		}
		if started {
			<-s.done
		}
	})
	return nil
}

// Index returns the underlying index (with its metrics decorator).
func (s *Service) Index() Index { return s.idx }

// Lookup appends one Match per instance holding at least keys[0], best first; see
// Index.Lookup. Zero allocations when dst has room; never returns a gone instance.
func (s *Service) Lookup(keys []uint64, dst []Match) []Match { return s.idx.Lookup(keys, dst) }

// Instances returns every known instance (gone ones for GoneRetention), sorted by id.
func (s *Service) Instances() []InstanceInfo {
	s.viewMu.RLock()
	out := make([]InstanceInfo, 0, len(s.view))
	for _, v := range s.view {
		out = append(out, v)
	}
	s.viewMu.RUnlock()
	for i := range out {
		if out[i].State != StateGone {
			out[i].Blocks = s.base.Blocks(out[i].ID)
		}
	}
	slices.SortFunc(out, func(a, b InstanceInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Instance returns one instance's view.
func (s *Service) Instance(id string) (InstanceInfo, bool) {
	s.viewMu.RLock()
	v, ok := s.view[id]
	s.viewMu.RUnlock()
	if ok && v.State != StateGone {
		v.Blocks = s.base.Blocks(id)
	}
	return v, ok
}

// Stats are the service's counters.
type Stats struct {
	IndexStats
	EventsApplied, Gaps, Snapshots, Lookups uint64
}

// Stats returns the index sizes and the ingestion counters.
func (s *Service) Stats() Stats {
	return Stats{
		IndexStats:    s.idx.Stats(),
		EventsApplied: s.idx.EventsApplied(),
		Gaps:          s.gaps.Load(),
		Snapshots:     s.snapshots.Load(),
		Lookups:       s.idx.Lookups(),
	}
}

// BlockSize returns the block size of the instances serving model (as base model or
// adapter), or the configured default.
func (s *Service) BlockSize(model string) int {
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	for _, v := range s.view {
		if d := v.Descriptor; d != nil && d.BlockSize > 0 && (model == "" || d.Model == model || slices.Contains(d.Adapters, model)) {
			return int(d.BlockSize)
		}
	}
	return s.cfg.BlockSize
}

// Subscribe calls f for every instance change (added, updated, removed, warm) until
// cancel is called. f runs on the ingestion goroutine: it must return quickly.
func (s *Service) Subscribe(f func(InstanceEvent)) (cancel func()) {
	s.subMu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = f
	s.subMu.Unlock()
	return func() {
		s.subMu.Lock()
		delete(s.subs, id)
		s.subMu.Unlock()
	}
}

// ---- ingestion goroutine ----

func (s *Service) run(ctx context.Context) {
	defer close(s.done)
	defer s.unsubscribe()
	tick := time.NewTicker(min(s.cfg.StaleAfter/4, 250*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-s.msgs:
			s.handleMsg(ctx, msg)
		case r := <-s.snaps:
			s.handleSnapshot(ctx, r)
		case now := <-tick.C:
			s.tick(ctx, now)
		}
	}
}

func (s *Service) handleMsg(ctx context.Context, msg *nats.Msg) {
	now := time.Now()
	switch {
	case strings.HasPrefix(msg.Subject, kvroutev1.SubjectEvents):
		var b kvroutev1.EventBatch
		if err := proto.Unmarshal(msg.Data, &b); err != nil {
			s.m.decodeErrors.Inc()
			s.log.Warn("bad event batch", "subject", msg.Subject, "err", err)
			return
		}
		if b.Instance == "" {
			b.Instance = strings.TrimPrefix(msg.Subject, kvroutev1.SubjectEvents)
		}
		if err := kvroutev1.ValidateID(b.Instance); err != nil {
			s.m.decodeErrors.Inc()
			s.log.Warn("event batch with bad instance id", "subject", msg.Subject, "err", err)
			return
		}
		s.handleBatch(ctx, &b, now)
	case strings.HasPrefix(msg.Subject, kvroutev1.SubjectHeartbeat):
		var hb kvroutev1.Heartbeat
		if err := proto.Unmarshal(msg.Data, &hb); err != nil {
			s.m.decodeErrors.Inc()
			s.log.Warn("bad heartbeat", "subject", msg.Subject, "err", err)
			return
		}
		id := strings.TrimPrefix(msg.Subject, kvroutev1.SubjectHeartbeat)
		if hb.Descriptor_ != nil && hb.Descriptor_.Id != "" {
			id = hb.Descriptor_.Id
		}
		if err := kvroutev1.ValidateID(id); err != nil {
			s.m.decodeErrors.Inc()
			s.log.Warn("heartbeat with bad instance id", "subject", msg.Subject, "err", err)
			return
		}
		s.handleHeartbeat(ctx, id, &hb, now)
	}
}

// get returns the instance, creating it (joining) when new or gone.
func (s *Service) get(id string, now time.Time) (*instance, bool) {
	in := s.insts[id]
	if in != nil && !in.gone {
		return in, false
	}
	in = &instance{id: id, sync: StateJoining, joinedAt: now, backoff: s.cfg.SnapshotRetryMin}
	s.insts[id] = in
	return in, true
}

func (s *Service) handleBatch(ctx context.Context, b *kvroutev1.EventBatch, now time.Time) {
	in, added := s.get(b.Instance, now)
	ts := b.EngineTimeUnixNano
	if ts <= 0 {
		ts = b.SentAtUnixNano
	}
	if ts > 0 {
		lag := max(now.Sub(time.Unix(0, ts)), 0)
		s.m.lag.Observe(lag.Seconds())
		if in.lag == 0 {
			in.lag = lag
		} else {
			in.lag += (lag - in.lag) / lagSmoothing
		}
	}
	before := in.state()
	s.applyOrBuffer(ctx, in, b, now)
	s.publish(in, added, before)
}

// applyOrBuffer applies b in order, buffers it while a snapshot is pending, or starts a
// snapshot when b does not follow what was applied.
func (s *Service) applyOrBuffer(ctx context.Context, in *instance, b *kvroutev1.EventBatch, now time.Time) {
	if in.sync != StateReady {
		// A batch that starts a fresh epoch from nothing makes a complete key set: no
		// snapshot needed, and a pending one would be older.
		if b.Cleared && b.Seq == 1 && b.Epoch > in.epoch {
			in.buffer = in.buffer[:0]
			if in.inFlight {
				in.snapGen++
				in.inFlight = false
			}
			s.apply(in, b, now)
			return
		}
		s.bufferBatch(in, b)
		s.maybeSnapshot(ctx, in, now)
		return
	}
	switch {
	case b.Epoch == in.epoch && b.Seq <= in.lastSeq, b.Epoch < in.epoch:
		s.m.duplicates.Inc() // old or repeated: already in the state
	case b.Epoch == in.epoch && b.Seq == in.lastSeq+1:
		s.apply(in, b, now)
	case b.Epoch > in.epoch && b.Cleared && b.Seq == 1:
		s.apply(in, b, now)
	default:
		s.log.Info("gap in event batches, asking for a snapshot", "instance", in.id,
			"epoch", in.epoch, "last_seq", in.lastSeq, "got_epoch", b.Epoch, "got_seq", b.Seq)
		s.gap(in)
		s.bufferBatch(in, b)
		s.maybeSnapshot(ctx, in, now)
	}
}

func (s *Service) gap(in *instance) {
	in.gaps++
	s.gaps.Add(1)
	s.m.gaps.Inc()
	if in.sync == StateReady {
		in.sync = StateSyncing
	}
}

func (s *Service) bufferBatch(in *instance, b *kvroutev1.EventBatch) {
	if len(in.buffer) >= s.cfg.MaxBufferedBatches {
		// The snapshot will be older than what we drop: it must be asked again after.
		in.buffer = in.buffer[:0]
		s.m.bufferOverflows.Inc()
	}
	in.buffer = append(in.buffer, b)
}

func (s *Service) apply(in *instance, b *kvroutev1.EventBatch, now time.Time) {
	if err := s.idx.Apply(b); err != nil {
		s.log.Warn("cannot apply batch", "instance", in.id, "err", err)
		return
	}
	n := uint64(len(b.Removed))
	for _, st := range b.Stored {
		n += uint64(len(st.Keys))
	}
	in.applied += n
	in.epoch, in.lastSeq = b.Epoch, b.Seq
	in.lastUpd = now
	in.sync = StateReady
	in.behind = 0
}

func (s *Service) handleHeartbeat(ctx context.Context, id string, hb *kvroutev1.Heartbeat, now time.Time) {
	in, added := s.get(id, now)
	before := in.state()
	if hb.Descriptor_ != nil {
		in.desc = hb.Descriptor_
	}
	if hb.Load != nil {
		in.load = hb.Load
		in.hits.add(hitSample{at: now, hits: hb.Load.PrefixCacheHits, queries: hb.Load.PrefixCacheQueries}, s.cfg.WarmupWindow)
	}
	in.lastHB = now
	in.stale = false
	switch {
	case in.sync != StateReady:
		s.maybeSnapshot(ctx, in, now)
	case in.sync == StateReady && (hb.Epoch != in.epoch || hb.LastSeq > in.lastSeq):
		// The agent published batches we never saw (a lost trailing batch, or a new epoch
		// whose first batch was lost). Allow one heartbeat of slack for batches in transit.
		in.behind++
		if in.behind >= 2 {
			s.log.Info("heartbeat ahead of applied batches, asking for a snapshot", "instance", id,
				"epoch", in.epoch, "last_seq", in.lastSeq, "hb_epoch", hb.Epoch, "hb_last_seq", hb.LastSeq)
			s.gap(in)
			in.behind = 0
			s.maybeSnapshot(ctx, in, now)
		}
	default:
		in.behind = 0
	}
	warmBefore := in.warmup.Warm
	s.updateWarmup(now)
	s.publishAs(in, added, before, true)
	if !warmBefore && in.warmup.Warm {
		s.emit(EventWarm, in, now)
	}
}

func (s *Service) tick(ctx context.Context, now time.Time) {
	for id, in := range s.insts {
		if in.gone {
			if now.Sub(in.goneAt) > s.cfg.GoneRetention {
				delete(s.insts, id)
				s.viewMu.Lock()
				delete(s.view, id)
				s.viewMu.Unlock()
			}
			continue
		}
		before := in.state()
		last := in.lastHB
		if last.IsZero() {
			last = in.joinedAt
		}
		switch silent := now.Sub(last); {
		case silent > s.cfg.InstanceTTL:
			s.log.Info("instance gone: no heartbeat", "instance", id, "silent", silent.Round(time.Millisecond))
			in.gone, in.goneAt = true, now
			in.buffer = nil
			in.snapGen++ // ignore a snapshot in flight
			in.inFlight = false
			s.idx.RemoveInstance(id)
			s.publish(in, false, before)
			continue
		case silent > s.cfg.StaleAfter:
			in.stale = true
		}
		if in.sync != StateReady {
			s.maybeSnapshot(ctx, in, now)
		}
		if in.state() != before {
			s.publish(in, false, before)
		}
	}
	s.updateWarmup(now)
}

// updateWarmup recomputes the fleet's and every instance's windowed hit rate.
func (s *Service) updateWarmup(now time.Time) {
	var fh, fq float64
	withData := 0
	for _, in := range s.insts {
		if in.gone {
			continue
		}
		h, q := in.hits.delta()
		if q > 0 {
			fh += h
			fq += q
			withData++
		}
	}
	fleet := 0.0
	if fq > 0 {
		fleet = fh / fq
	}
	s.m.fleetHitRate.Set(fleet)
	for _, in := range s.insts {
		if in.gone {
			continue
		}
		h, q := in.hits.delta()
		in.warmup.FleetHitRate = fleet
		if q > 0 {
			in.warmup.HitRate = h / q
		} else {
			in.warmup.HitRate = 0
		}
		if !in.warmup.Warm && q > 0 && withData >= 2 && in.warmup.HitRate >= fleet {
			in.warmup.Warm = true
			in.warmup.WarmupTime = now.Sub(in.joinedAt)
			s.log.Info("instance warm", "instance", in.id, "warmup", in.warmup.WarmupTime.Round(time.Millisecond),
				"hit_rate", in.warmup.HitRate, "fleet_hit_rate", fleet)
		}
	}
}

// ---- snapshots ----

type snapshotResult struct {
	id        string
	gen       uint64
	epoch     uint64
	seq       uint64
	blockSize uint32
	keys      []uint64
	err       error
}

// maybeSnapshot asks for a snapshot unless one is in flight or a failed one's backoff
// has not passed yet.
func (s *Service) maybeSnapshot(ctx context.Context, in *instance, now time.Time) {
	if in.inFlight || in.gone || now.Before(in.nextSnapAt) {
		return
	}
	in.inFlight = true
	in.snapGen++
	gen, id := in.snapGen, in.id
	go func() {
		r := s.fetchSnapshot(ctx, id)
		r.id, r.gen = id, gen
		select {
		case s.snaps <- r:
		case <-ctx.Done():
		}
	}()
}

// fetchSnapshot asks the instance's agent for its key set and collects the chunks.
func (s *Service) fetchSnapshot(ctx context.Context, id string) snapshotResult {
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return snapshotResult{err: fmt.Errorf("%w: subscribe %s: %w", ErrSnapshot, inbox, err)}
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	req, _ := proto.Marshal(&kvroutev1.SnapshotRequest{Instance: id, MaxKeysPerChunk: s.cfg.SnapshotChunkKeys, Requester: s.cfg.Name})
	if err := s.nc.PublishRequest(kvroutev1.SubjectSnapshot+id, inbox, req); err != nil {
		return snapshotResult{err: fmt.Errorf("%w: request: %w", ErrSnapshot, err)}
	}
	var r snapshotResult
	next := -1
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.SnapshotTimeout)
		msg, err := sub.NextMsgWithContext(cctx)
		cancel()
		if err != nil {
			return snapshotResult{err: fmt.Errorf("%w: %s: waiting for chunk %d: %w", ErrSnapshot, id, next+1, err)}
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			return snapshotResult{err: fmt.Errorf("%w: %s: %w", ErrSnapshot, id, nats.ErrNoResponders)}
		}
		var c kvroutev1.SnapshotChunk
		if err := proto.Unmarshal(msg.Data, &c); err != nil {
			return snapshotResult{err: fmt.Errorf("%w: %s: bad chunk: %w", ErrSnapshot, id, err)}
		}
		if c.Error != "" {
			return snapshotResult{err: fmt.Errorf("%w: %s: agent: %s", ErrSnapshot, id, c.Error)}
		}
		if c.Instance != "" && c.Instance != id {
			return snapshotResult{err: fmt.Errorf("%w: asked %s, got a chunk of %s", ErrSnapshot, id, c.Instance)}
		}
		if next >= 0 && (int(c.Chunk) != next || c.Epoch != r.epoch || c.Seq != r.seq) {
			return snapshotResult{err: fmt.Errorf("%w: %s: chunk %d (epoch %d seq %d) after chunk %d (epoch %d seq %d)",
				ErrSnapshot, id, c.Chunk, c.Epoch, c.Seq, next-1, r.epoch, r.seq)}
		}
		if next < 0 {
			r.epoch, r.seq = c.Epoch, c.Seq
			if c.TotalKeys > 0 && c.TotalKeys < 1<<28 {
				r.keys = make([]uint64, 0, c.TotalKeys)
			}
		}
		next = int(c.Chunk) + 1
		r.blockSize = max(r.blockSize, c.BlockSize)
		r.keys = append(r.keys, c.Keys...)
		if c.Last {
			return r
		}
	}
}

// storeChunk is how many snapshot keys are stored per index lock hold.
const storeChunk = 1 << 14

func (s *Service) handleSnapshot(ctx context.Context, r snapshotResult) {
	in := s.insts[r.id]
	if in == nil || in.gone || r.gen != in.snapGen {
		return // superseded
	}
	in.inFlight = false
	now := time.Now()
	before := in.state()
	if r.err != nil {
		s.m.snapshotErrors.Inc()
		in.nextSnapAt = now.Add(in.backoff)
		s.log.Warn("snapshot failed, will retry", "instance", r.id, "retry_in", in.backoff, "err", r.err)
		in.backoff = min(2*in.backoff, s.cfg.SnapshotRetryMax)
		return
	}
	in.backoff = s.cfg.SnapshotRetryMin
	s.idx.RemoveInstance(r.id)
	for k := 0; k < len(r.keys); k += storeChunk {
		if err := s.idx.Store(r.id, r.keys[k:min(k+storeChunk, len(r.keys))]); err != nil {
			s.log.Warn("cannot store snapshot", "instance", r.id, "err", err)
			in.nextSnapAt = now.Add(s.cfg.SnapshotRetryMax)
			in.sync = StateJoining
			s.publish(in, false, before)
			return
		}
	}
	in.snapshots++
	s.snapshots.Add(1)
	s.m.snapshots.Inc()
	in.epoch, in.lastSeq = r.epoch, r.seq
	in.sync = StateReady
	in.lastUpd = now
	in.behind = 0
	s.log.Debug("snapshot applied", "instance", r.id, "epoch", r.epoch, "seq", r.seq, "keys", len(r.keys))
	// Splice: replay the batches that arrived meanwhile, in order, on top of the snapshot.
	buf := in.buffer
	in.buffer = nil
	slices.SortStableFunc(buf, func(a, b *kvroutev1.EventBatch) int {
		if a.Epoch != b.Epoch {
			return cmpU64(a.Epoch, b.Epoch)
		}
		return cmpU64(a.Seq, b.Seq)
	})
	for _, b := range buf {
		s.applyOrBuffer(ctx, in, b, now)
	}
	s.publish(in, false, before)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ---- view and notifications ----

// lagSmoothing is the moving average's window: each batch moves it 1/lagSmoothing of the way.
const lagSmoothing = 8

func (s *Service) info(in *instance) InstanceInfo {
	return InstanceInfo{
		IngestionLag:  in.lag,
		ID:            in.id,
		Descriptor:    in.desc,
		State:         in.state(),
		Epoch:         in.epoch,
		LastSeq:       in.lastSeq,
		Load:          in.load,
		JoinedAt:      in.joinedAt,
		LastHeartbeat: in.lastHB,
		LastUpdate:    in.lastUpd,
		Warmup:        in.warmup,
		Gaps:          in.gaps,
		Snapshots:     in.snapshots,
		EventsApplied: in.applied,
	}
}

// publish updates the readers' view and notifies subscribers of a change of state.
func (s *Service) publish(in *instance, added bool, before State) {
	s.publishAs(in, added, before, false)
}

func (s *Service) publishAs(in *instance, added bool, before State, always bool) {
	v := s.info(in)
	s.viewMu.Lock()
	s.view[in.id] = v
	s.viewMu.Unlock()
	now := time.Now()
	switch {
	case added:
		s.emit(EventAdded, in, now)
	case in.gone && before != StateGone:
		s.emit(EventRemoved, in, now)
	case always || v.State != before:
		s.emit(EventUpdated, in, now)
	}
}

func (s *Service) emit(t EventType, in *instance, now time.Time) {
	s.subMu.Lock()
	if len(s.subs) == 0 {
		s.subMu.Unlock()
		return
	}
	fs := make([]func(InstanceEvent), 0, len(s.subs))
	for _, f := range s.subs {
		fs = append(fs, f)
	}
	s.subMu.Unlock()
	ev := InstanceEvent{Type: t, Instance: s.info(in), At: now}
	if !in.gone {
		ev.Instance.Blocks = s.base.Blocks(in.id)
	}
	for _, f := range fs {
		f(ev)
	}
}
