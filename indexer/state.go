package indexer

import (
	"time"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// State is an instance's state in the index.
type State int

// Instance states.
const (
	// StateJoining: heard of, no consistent key set yet (first snapshot pending).
	StateJoining State = iota + 1
	// StateSyncing: a gap or lost history was seen; a snapshot is pending, the old keys still count.
	StateSyncing
	// StateReady: the key set is consistent with the agent's.
	StateReady
	// StateStale: no heartbeat for StaleAfter; its keys still count until InstanceTTL.
	StateStale
	// StateGone: removed with its keys; never returned by Lookup.
	StateGone
)

func (s State) String() string {
	switch s {
	case StateJoining:
		return "joining"
	case StateSyncing:
		return "syncing"
	case StateReady:
		return "ready"
	case StateStale:
		return "stale"
	case StateGone:
		return "gone"
	}
	return "unknown"
}

// Proto returns the wire enum.
func (s State) Proto() kvroutev1.InstanceState {
	switch s {
	case StateJoining:
		return kvroutev1.InstanceState_INSTANCE_STATE_JOINING
	case StateSyncing:
		return kvroutev1.InstanceState_INSTANCE_STATE_SYNCING
	case StateReady:
		return kvroutev1.InstanceState_INSTANCE_STATE_READY
	case StateStale:
		return kvroutev1.InstanceState_INSTANCE_STATE_STALE
	case StateGone:
		return kvroutev1.InstanceState_INSTANCE_STATE_GONE
	}
	return kvroutev1.InstanceState_INSTANCE_STATE_UNSPECIFIED
}

var allStates = []State{StateJoining, StateSyncing, StateReady, StateStale, StateGone}

// Warmup describes how an instance's prefix-cache hit rate caught up with the fleet's.
type Warmup struct {
	// HitRate is the instance's engine-reported prefix-cache hit rate (hits/queries, in
	// tokens) over the sliding window; FleetHitRate the same over every live instance.
	HitRate, FleetHitRate float64
	// Warm is set the first time after join that HitRate ≥ FleetHitRate (with traffic on
	// the instance and on at least one other instance in the window); WarmupTime is the
	// time from join until then.
	Warm       bool
	WarmupTime time.Duration
}

// InstanceInfo is a read-only view of one instance. Descriptor and Load are shared with
// the index: do not modify them.
type InstanceInfo struct {
	ID         string
	Descriptor *kvroutev1.InstanceDescriptor
	State      State
	// Blocks is the number of keys the index holds for the instance.
	Blocks        int
	Epoch         uint64
	LastSeq       uint64
	Load          *kvroutev1.Load
	JoinedAt      time.Time
	LastHeartbeat time.Time
	LastUpdate    time.Time
	// IngestionLag is a moving average (over about the last 8 batches) of the time from
	// the engine's batch timestamp to the index applying it.
	IngestionLag time.Duration
	Warmup       Warmup
	Gaps         uint64
	Snapshots    uint64
	// EventsApplied counts block events (keys stored or removed) applied for it.
	EventsApplied uint64
}

// Proto converts the view to the wire message.
func (i InstanceInfo) Proto() *kvroutev1.InstanceInfo {
	p := &kvroutev1.InstanceInfo{
		Descriptor_:           i.Descriptor,
		State:                 i.State.Proto(),
		Blocks:                uint64(i.Blocks),
		Epoch:                 i.Epoch,
		LastSeq:               i.LastSeq,
		Load:                  i.Load,
		LastUpdateUnixNano:    unixNano(i.LastUpdate),
		LastHeartbeatUnixNano: unixNano(i.LastHeartbeat),
		Warmup: &kvroutev1.Warmup{
			JoinedAtUnixNano: unixNano(i.JoinedAt),
			HitRate:          i.Warmup.HitRate,
			FleetHitRate:     i.Warmup.FleetHitRate,
			Warm:             i.Warmup.Warm,
			WarmupSeconds:    i.Warmup.WarmupTime.Seconds(),
		},
		Gaps:          i.Gaps,
		Snapshots:     i.Snapshots,
		EventsApplied: i.EventsApplied,
	}
	if p.Descriptor_ == nil {
		p.Descriptor_ = &kvroutev1.InstanceDescriptor{Id: i.ID}
	}
	return p
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// EventType says what changed about an instance.
type EventType int

// Instance event types.
const (
	EventAdded EventType = iota + 1
	EventUpdated
	EventRemoved
	EventWarm
)

func (t EventType) String() string {
	switch t {
	case EventAdded:
		return "added"
	case EventUpdated:
		return "updated"
	case EventRemoved:
		return "removed"
	case EventWarm:
		return "warm"
	}
	return "unknown"
}

// Proto returns the wire enum.
func (t EventType) Proto() kvroutev1.WatchEventType {
	switch t {
	case EventAdded:
		return kvroutev1.WatchEventType_WATCH_EVENT_TYPE_ADDED
	case EventUpdated:
		return kvroutev1.WatchEventType_WATCH_EVENT_TYPE_UPDATED
	case EventRemoved:
		return kvroutev1.WatchEventType_WATCH_EVENT_TYPE_REMOVED
	case EventWarm:
		return kvroutev1.WatchEventType_WATCH_EVENT_TYPE_WARM
	}
	return kvroutev1.WatchEventType_WATCH_EVENT_TYPE_UNSPECIFIED
}

// InstanceEvent is one notification of Service.Subscribe.
type InstanceEvent struct {
	Type     EventType
	Instance InstanceInfo
	At       time.Time
}
