package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/tokenizer"
)

// TestFleetRoutesToTheHolderAndGrows starts a real two-engine fleet, sends the same long
// token-id prompt twice through the router and checks that the second lands on the
// engine that cached it (the engine reports the cached tokens), that the index agrees
// with each engine's own cache, and that an engine added later joins the router's view.
func TestFleetRoutesToTheHolderAndGrows(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Engines = 2
	cfg.GRPCListenAddr = "127.0.0.1:0"
	cfg.Router.DebugHeaders = true
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := Start(ctx, cfg, tok, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.GRPCAddr() == "" || f.NATSURL() == "" || len(f.Engines()) != 2 {
		t.Fatalf("grpc %q nats %q engines %d", f.GRPCAddr(), f.NATSURL(), len(f.Engines()))
	}

	prompt := make([]int, 320) // 20 blocks of 16
	for i := range prompt {
		prompt[i] = 1000 + i
	}
	body, _ := json.Marshal(map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": prompt, "max_tokens": 2})
	send := func() (instance, decision string, cached int) {
		resp, err := http.Post(f.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Kvroute-Instance"), resp.Header.Get("X-Kvroute-Decision"), out.Usage.Details.Cached
	}
	first, _, cached := send()
	if cached != 0 {
		t.Fatalf("first request reported %d cached tokens on cold engines", cached)
	}
	// The index learns the blocks from the engine's events via its agent.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var holder *Engine
		for _, e := range f.Engines() {
			if e.ID == first {
				holder = e
			}
		}
		if holder == nil {
			t.Fatalf("response named instance %q, not one of the fleet's", first)
		}
		keys := holder.Sim.KVBlockKeys()
		if len(keys) > 0 && slices.Equal(holder.Agent.Keys(), keys) && len(f.Index().Lookup(keys[:1], nil)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the index never learned the first request's blocks")
		}
		time.Sleep(50 * time.Millisecond)
	}
	second, decision, cached := send()
	if second != first || decision != "cache_hit" || cached != 304 {
		t.Fatalf("repeat went to %s by %s with %d cached tokens; want %s, cache_hit, 304 (19 full blocks: the last token is always computed)", second, decision, cached, first)
	}

	if err := f.AddEngines(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Engines()); n != 3 {
		t.Fatalf("%d engines after adding one", n)
	}
	if err := f.WaitHealthy(ctx, 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, bad := range []func(*Config){
		func(c *Config) { c.Engines = -1 },
		func(c *Config) { c.Profile = "no-such-profile" },
		func(c *Config) { c.TimeScale = -1 },
		func(c *Config) { c.HeartbeatInterval = 0 },
	} {
		c := DefaultConfig()
		bad(&c)
		if err := c.Validate(); !errors.Is(err, ErrFleet) {
			t.Errorf("want ErrFleet, got %v", err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
