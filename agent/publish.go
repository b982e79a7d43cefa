package agent

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

var marshalOpts = proto.MarshalOptions{}

func protoMarshal(dst []byte, m proto.Message) ([]byte, error) {
	return marshalOpts.MarshalAppend(dst, m)
}

// onSnapshot answers a SnapshotRequest on its reply subject with SnapshotChunk messages
// holding every key of the mirror, tagged with the (epoch, seq) they are the state after.
// Pending changes are published first, so the snapshot is exactly the published state.
func (a *Agent) onSnapshot(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	var req kvroutev1.SnapshotRequest
	if err := proto.Unmarshal(msg.Data, &req); err != nil {
		a.replySnapshotError(msg.Reply, "bad SnapshotRequest: "+err.Error())
		return
	}
	if req.Instance != "" && req.Instance != a.id {
		a.replySnapshotError(msg.Reply, "wrong instance "+req.Instance+", this is "+a.id)
		return
	}
	a.mu.Lock()
	if a.mir == nil {
		a.mu.Unlock()
		a.replySnapshotError(msg.Reply, errNotStarted.Error())
		return
	}
	a.flushLocked()
	keys := a.mir.appendKeys(make([]uint64, 0, a.mir.numKeys()))
	epoch, seq, bs := a.epoch, a.seq, uint32(a.mir.blockSize)
	a.mu.Unlock()

	per := a.cfg.SnapshotChunkKeys
	if req.MaxKeysPerChunk > 0 && int(req.MaxKeysPerChunk) < per {
		per = int(req.MaxKeysPerChunk)
	}
	per = min(per, a.maxKeysPerMsg())
	chunk := &kvroutev1.SnapshotChunk{Instance: a.id, Epoch: epoch, Seq: seq, TotalKeys: uint64(len(keys)), BlockSize: bs}
	var buf []byte
	for i := uint32(0); ; i++ {
		n := min(per, len(keys))
		chunk.Chunk, chunk.Keys, chunk.Last = i, keys[:n], n == len(keys)
		keys = keys[n:]
		var err error
		if buf, err = protoMarshal(buf[:0], chunk); err == nil {
			err = a.nc.Publish(msg.Reply, buf)
		}
		if err != nil {
			a.met.publishErrors.Inc()
			a.log.Warn("snapshot reply failed", "requester", req.Requester, "err", err)
			return
		}
		if chunk.Last {
			break
		}
	}
	a.met.snapshots.Inc()
	a.log.Info("snapshot served", "requester", req.Requester, "keys", chunk.TotalKeys, "epoch", epoch, "seq", seq)
}

func (a *Agent) replySnapshotError(reply, msg string) {
	b, err := protoMarshal(nil, &kvroutev1.SnapshotChunk{Instance: a.id, Last: true, Error: msg})
	if err == nil {
		err = a.nc.Publish(reply, b)
	}
	if err != nil {
		a.log.Warn("snapshot error reply failed", "err", err)
	}
}

// heartbeatLoop scrapes the engine and publishes a heartbeat every HeartbeatInterval,
// and at once after NATS reconnects, so the index learns the epoch and last seq and
// resyncs if it missed anything while the connection was down.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.HeartbeatInterval)
	defer tick.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	reconnects := a.nc.Stats().Reconnects
	lastModels := time.Now()
	a.scrape(ctx)
	a.heartbeat()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			if r := a.nc.Stats().Reconnects; r != reconnects {
				reconnects = r
				a.log.Info("NATS reconnected: announcing epoch and seq")
				a.heartbeat()
			}
		case <-tick.C:
			if time.Since(lastModels) >= a.cfg.ModelsRefreshInterval {
				lastModels = time.Now()
				a.refreshModels(ctx)
			}
			a.scrape(ctx)
			a.heartbeat()
		}
	}
}

func (a *Agent) refreshModels(ctx context.Context) {
	_, adapters, err := a.eng.models(ctx)
	if err != nil {
		a.log.Debug("models refresh failed", "err", err)
		return
	}
	a.infoMu.Lock()
	a.adapters = adapters
	a.infoMu.Unlock()
}

func (a *Agent) scrape(ctx context.Context) {
	l, err := a.eng.load(ctx)
	a.infoMu.Lock()
	defer a.infoMu.Unlock()
	if err != nil {
		a.met.engineUp.Set(0)
		stale := proto.Clone(a.load).(*kvroutev1.Load)
		stale.Ok = false
		a.load = stale
		a.log.Debug("engine /metrics scrape failed", "err", err)
		return
	}
	a.met.engineUp.Set(1)
	a.load = l
}

// Heartbeat returns the heartbeat the agent would send now.
func (a *Agent) Heartbeat() *kvroutev1.Heartbeat {
	a.infoMu.Lock()
	hb := &kvroutev1.Heartbeat{
		Descriptor_: &kvroutev1.InstanceDescriptor{
			Id: a.id, EngineUrl: a.cfg.EngineURL, Model: a.model, Adapters: append([]string(nil), a.adapters...),
			DpRank: int32(a.cfg.DPRank), AgentVersion: a.cfg.AgentVersion, StartedAtUnixNano: a.started.UnixNano(),
		},
		Load: proto.Clone(a.load).(*kvroutev1.Load),
	}
	a.infoMu.Unlock()
	a.mu.Lock()
	hb.Epoch, hb.LastSeq = a.epoch, a.seq
	if a.mir != nil {
		hb.KeysHeld = uint64(a.mir.numKeys())
		hb.Descriptor_.BlockSize = uint32(a.mir.blockSize)
	} else {
		hb.Descriptor_.BlockSize = uint32(a.cfg.BlockSize)
	}
	a.mu.Unlock()
	hb.SentAtUnixNano = time.Now().UnixNano()
	return hb
}

func (a *Agent) heartbeat() {
	b, err := protoMarshal(nil, a.Heartbeat())
	if err == nil {
		err = a.nc.Publish(kvroutev1.SubjectHeartbeat+a.id, b)
	}
	if err != nil {
		a.met.publishErrors.Inc()
		a.log.Warn("heartbeat publish failed", "err", err)
	}
}
