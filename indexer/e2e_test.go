package indexer

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/agent"
	"github.com/kvroute/kvroute/sim"
)

// e2eNode is a simulated engine with its real agent.
type e2eNode struct {
	sim   *sim.Server
	agent *agent.Agent
	stop  func()
}

func startNode(t *testing.T, nc *nats.Conn, i int) *e2eNode {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	cfg.Seed = int64(i + 1)
	cfg.HashSeed = fmt.Sprint(i)
	s, err := sim.New(cfg, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	must(t, err)
	must(t, s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Close() })
	acfg := agent.DefaultConfig()
	acfg.EngineURL = s.URL()
	acfg.ZMQEndpoint = s.EventsEndpoint()
	acfg.ReplayEndpoint = s.ReplayEndpoint()
	acfg.InstanceID = fmt.Sprintf("sim-%d", i)
	acfg.HeartbeatInterval = 50 * time.Millisecond
	a, err := agent.New(acfg, nc, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &e2eNode{sim: s, agent: a, stop: stop}
}

// complete sends a token-id completion with max_tokens 1 to the simulated engine.
func complete(t *testing.T, url string, ids []uint32) {
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":1}`, sim.DefaultModel, jsonInts(ids))
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader([]byte(body)))
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: HTTP %d", resp.StatusCode)
	}
}

// TestEndToEndWithSimsAndAgents runs simulated engines, their real agents and the index
// over an in-process NATS server: the index's key set equals every agent's mirror and
// every sim's cache; a restarted index rebuilds the same state from snapshots; a stopped
// agent's instance goes stale, then gone, and lookups stop returning it.
func TestEndToEndWithSimsAndAgents(t *testing.T) {
	url := startNATS(t)
	nc, err := nats.Connect(url)
	must(t, err)
	defer nc.Close()
	cfg := testConfig()
	cfg.InstanceTTL = 1500 * time.Millisecond
	e := startService(t, url, cfg)
	nodes := []*e2eNode{startNode(t, nc, 0), startNode(t, nc, 1), startNode(t, nc, 2)}
	eventually(t, 10*time.Second, "3 instances ready", func() bool {
		n := 0
		for _, in := range e.svc.Instances() {
			if in.State == StateReady {
				n++
			}
		}
		return n == 3
	})
	// A workload with shared prefixes: system prompts of 64 tokens, user turns after.
	shared := make([][]uint32, 4)
	for p := range shared {
		shared[p] = make([]uint32, 64)
		for i := range shared[p] {
			shared[p][i] = uint32(10000*p + i + 1)
		}
	}
	for r := range 30 {
		ids := append(slices.Clone(shared[r%len(shared)]), make([]uint32, 16*(1+r%5)+7)...)
		for i := 64; i < len(ids); i++ {
			ids[i] = uint32(50000 + 97*r + i)
		}
		complete(t, nodes[r%len(nodes)].sim.URL(), ids)
	}
	consistent := func(e *testEnv) func() bool {
		return func() bool {
			for _, n := range nodes {
				want := n.sim.KVBlockKeys()
				if len(want) == 0 || !slices.Equal(n.agent.Keys(), want) ||
					!slices.Equal(e.svc.Index().InstanceKeys(n.agent.ID(), nil), want) {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 15*time.Second, "index == agent mirror == sim cache", consistent(e))

	// Restart the index mid-run: a fresh one rebuilds the same state from snapshots.
	_ = e.svc.Close()
	e2 := startService(t, url, cfg)
	for r := range 6 {
		ids := append(slices.Clone(shared[r%len(shared)]), uint32(70000+r), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
		complete(t, nodes[r%len(nodes)].sim.URL(), ids)
	}
	eventually(t, 15*time.Second, "restarted index rebuilt", consistent(e2))
	if st := e2.svc.Stats(); st.Snapshots < 3 {
		t.Fatalf("restarted index: %+v, want a snapshot per instance", st)
	}

	// Stop node 2's agent: stale, then gone; lookups no longer return it.
	victim := nodes[2].agent.ID()
	keys := e2.svc.Index().InstanceKeys(victim, nil)
	nodes[2].stop()
	eventually(t, 10*time.Second, "stale", func() bool { return e2.state(victim) == StateStale })
	eventually(t, 10*time.Second, "gone", func() bool { return e2.state(victim) == StateGone })
	for _, k := range keys {
		for _, m := range e2.svc.Lookup([]uint64{k}, nil) {
			if m.Instance == victim {
				t.Fatalf("lookup returned gone instance %s", victim)
			}
		}
	}
	if n := e2.svc.Index().Blocks(victim); n != 0 {
		t.Fatalf("gone instance still holds %d blocks", n)
	}
}
