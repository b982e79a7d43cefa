package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// TestAgentAgainstSimulator: the simulator over real ZMQ (events + replay) and HTTP,
// the agent over a real in-process NATS: the agent's mirror and the published view
// equal the simulator's true prefix cache.
func TestAgentAgainstSimulator(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Skipf("tokenizer: %v", err)
	}
	cfg := sim.DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.KVEventsEnabled = true
	cfg.KVEventsEndpoint = "tcp://127.0.0.1:*"
	cfg.KVEventsReplayEndpoint = "tcp://127.0.0.1:*"
	cfg.TimeScale = 0
	cfg.NumGPUBlocks = 64
	s, err := sim.New(cfg, tok, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, nc := startNATS(t)
	acfg := DefaultConfig()
	acfg.EngineURL, acfg.ZMQEndpoint, acfg.ReplayEndpoint = s.URL(), s.EventsEndpoint(), s.ReplayEndpoint()
	a, err := New(acfg, nc, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.Run(ctx) }()
	v := newView(t, nc, a.ID())
	eventually(t, "agent subscribed", func() bool { return a.sub.conns.Load() > 0 })
	for i := range 40 {
		ids := make([]string, 0, 80)
		for j := range 48 + i%32 {
			ids = append(ids, fmt.Sprint((i%5)*1000+j*(1+i%3)))
		}
		body := fmt.Sprintf(`{"model":%q,"prompt":[%s],"max_tokens":2}`, cfg.Model, join(ids))
		resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("completion status %d", resp.StatusCode)
		}
	}
	eventually(t, "agent mirror == sim cache", func() bool { return slices.Equal(a.Keys(), s.KVBlockKeys()) })
	eventually(t, "published view == sim cache", func() bool { return slices.Equal(v.sorted(), s.KVBlockKeys()) })
	v.check(t)
	if len(a.Keys()) == 0 {
		t.Fatal("no keys mirrored")
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}
