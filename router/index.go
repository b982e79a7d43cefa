package router

import "github.com/kvroute/kvroute/indexer"

// indexMatch is one instance's leading run of cached blocks for a lookup.
type indexMatch = indexer.Match

// instanceInfo is the index's view of one instance, as the router needs it.
type instanceInfo struct {
	id        string
	engineURL string
	model     string
	adapters  []string
	blockSize int
	// routable is false for stale or gone instances.
	routable bool
	idx      indexState
	// load from the last heartbeat
	running, waiting int
	hits, queries    float64
	loadOK           bool
}

// indexSource is the prefix-block index as the router reads it: one Lookup per request
// and the instance list for the candidate set. The adapter over *indexer.Service lives in
// index_service.go; tests may hand-feed one.
type indexSource interface {
	lookup(keys []uint64, dst []indexMatch) []indexMatch
	instances() []instanceInfo
}

// serviceIndex reads an in-process *indexer.Service.
type serviceIndex struct{ svc *indexer.Service }

func (s serviceIndex) lookup(keys []uint64, dst []indexMatch) []indexMatch {
	return s.svc.Lookup(keys, dst)
}

func (s serviceIndex) instances() []instanceInfo {
	infos := s.svc.Instances()
	out := make([]instanceInfo, 0, len(infos))
	for _, in := range infos {
		ii := instanceInfo{
			id:       in.ID,
			routable: in.State == indexer.StateJoining || in.State == indexer.StateSyncing || in.State == indexer.StateReady,
			idx: indexState{
				state: in.State.String(), blocks: in.Blocks, epoch: in.Epoch, lastSeq: in.LastSeq,
				joinedAt: in.JoinedAt, lastUpdate: in.LastUpdate, lag: in.IngestionLag,
				hitRate: in.Warmup.HitRate, fleetHitRate: in.Warmup.FleetHitRate,
				warm: in.Warmup.Warm, warmup: in.Warmup.WarmupTime,
			},
		}
		if d := in.Descriptor; d != nil {
			ii.engineURL, ii.model, ii.adapters, ii.blockSize = d.GetEngineUrl(), d.GetModel(), d.GetAdapters(), int(d.GetBlockSize())
		}
		if l := in.Load; l != nil {
			ii.loadOK = l.GetOk()
			ii.running, ii.waiting = int(l.GetRunning()), int(l.GetWaiting())
			ii.hits, ii.queries = l.GetPrefixCacheHits(), l.GetPrefixCacheQueries()
		}
		out = append(out, ii)
	}
	return out
}

// subscribe asks for a refresh on every instance change.
func (s serviceIndex) subscribe(f func()) (cancel func()) {
	return s.svc.Subscribe(func(indexer.InstanceEvent) { f() })
}
