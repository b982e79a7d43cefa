package router

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// Two replicas over a real NATS server: each publishes its in-flight counts every
// ≤ 250 ms and counts the other's, so the threshold holds fleet-wide.
func TestReplicasShareInFlight(t *testing.T) {
	_, nc := startNATS(t)
	idx := newMemIndex()
	e := newTestEngine(t, "shared", defaultTok(t), idx)
	other := newTestEngine(t, "other", defaultTok(t), idx)
	release := make(chan struct{})
	e.hold.Store(&release)
	mk := func(id string) *Router {
		cfg := DefaultConfig()
		cfg.RouterID = id
		cfg.ConcurrencyThreshold = 1
		cfg.ListenAddr = "127.0.0.1:0"
		cfg.DebugHeaders = true
		cfg.Policy = PolicyPrefixHash
		cfg.InstanceRefreshInterval = 20 * time.Millisecond
		r, err := New(cfg, Deps{NATS: nc, Tokenizer: defaultTok(t), Registry: prometheus.NewRegistry(), index: idx})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		fleetReady(t, r, 2)
		return r
	}
	a, b := mk("router-a"), mk("router-b")
	// Find a body whose preferred instance is "shared".
	body := ""
	for i := range 100 {
		cand := chatBody(longText(i, 20), "q", "")
		if nextInstance(t, a, cand) == "shared" {
			body = cand
			break
		}
	}
	if body == "" {
		t.Fatal("no prompt prefers instance shared")
	}
	done := make(chan reply)
	go func() { done <- post(t, a.URL(), "/v1/chat/completions", body) }()
	waitFor(t, "router b sees a's in-flight request", func() bool { return b.fleet.Load().byID["shared"].remote.Load() == 1 })
	rep := post(t, b.URL(), "/v1/chat/completions", body)
	if rep.instance != "other" || rep.decision != "overflow" {
		t.Fatalf("replica b sent the request to %s (%s), want other (overflow)", rep.instance, rep.decision)
	}
	if st := b.Stats(); st.Fleet.PeerRouters != 1 {
		t.Fatalf("peer routers %d", st.Fleet.PeerRouters)
	}
	e.hold.Store(nil)
	close(release)
	<-done
	waitFor(t, "count drops back to zero", func() bool { return b.fleet.Load().byID["shared"].remote.Load() == 0 })
	if other.requests.Load() != 1 {
		t.Fatalf("other engine got %d requests", other.requests.Load())
	}
}

// A malformed RouterLoad is ignored and logged; the replica keeps working.
func TestReplicasIgnoreGarbage(t *testing.T) {
	_, nc := startNATS(t)
	idx := newMemIndex()
	newTestEngine(t, "x", defaultTok(t), idx)
	cfg := DefaultConfig()
	cfg.RouterID = "me"
	rr, err := New(cfg, Deps{NATS: nc, Tokenizer: defaultTok(t), Registry: prometheus.NewRegistry(), index: idx})
	if err != nil {
		t.Fatal(err)
	}
	if err := rr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	fleetReady(t, rr, 1)
	_ = nc.Publish(kvroutev1.SubjectInFlight+"junk", []byte{0xff, 0xff, 0xff})
	good, _ := proto.Marshal(&kvroutev1.RouterLoad{RouterId: "peer", InFlight: map[string]uint32{"x": 3}})
	_ = nc.Publish(kvroutev1.SubjectInFlight+"peer", good)
	waitFor(t, "peer count applied", func() bool { return rr.fleet.Load().byID["x"].remote.Load() == 3 })
	waitFor(t, "stale peer count expires", func() bool { return rr.fleet.Load().byID["x"].remote.Load() == 0 })
}
