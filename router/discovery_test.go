package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Static mode: engines from a list; models from each /v1/models, load from /metrics;
// routing by hash affinity and load alone.
func TestStaticEngines(t *testing.T) {
	tok := defaultTok(t)
	a := newTestEngine(t, "a", tok, nil, "lora-1")
	b := newTestEngine(t, "b", tok, nil)
	cfg := DefaultConfig()
	cfg.Engines = []string{a.srv.URL, b.srv.URL + "/"}
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DebugHeaders = true
	r, err := New(cfg, Deps{Tokenizer: tok, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitFor(t, "models scraped", func() bool { return len(r.fleet.Load().byModel["Qwen/Qwen3-0.6B"]) == 2 })
	if got := r.fleet.Load().byModel["lora-1"]; len(got) != 1 || got[0].id != staticID(a.srv.URL) {
		t.Fatalf("adapter served by %v", got)
	}
	body := chatBody(longText(7, 100), "q", "")
	x := post(t, r.URL(), "/v1/chat/completions", body)
	y := post(t, r.URL(), "/v1/chat/completions", body)
	if x.code != 200 || x.instance != y.instance || x.decision != "affinity" {
		t.Fatalf("static routing: %d %s/%s %s", x.code, x.instance, y.instance, x.decision)
	}
}

// Config errors are caught by New with ErrConfig.
func TestConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"policy":     func(c *Config) { c.Policy = "round-robin" },
		"tokenizer":  func(c *Config) { c.TokenizerMode = "magic" },
		"threshold":  func(c *Config) { c.ConcurrencyThreshold = 0 },
		"threshold2": func(c *Config) { c.ConcurrencyThreshold = 1025 },
		"hard limit": func(c *Config) { c.HardInFlightLimit = 3; c.ConcurrencyThreshold = 8 },
		"engine url": func(c *Config) { c.Engines = []string{"10.0.0.1:8000"} },
		"interval":   func(c *Config) { c.InFlightPublishInterval = time.Second },
		"router id":  func(c *Config) { c.RouterID = "a.b" },
		"body":       func(c *Config) { c.MaxBodyBytes = 0 },
	} {
		cfg := DefaultConfig()
		cfg.Engines = []string{"http://127.0.0.1:1"}
		mut(&cfg)
		if _, err := New(cfg, Deps{Tokenizer: defaultTok(t), Registry: prometheus.NewRegistry()}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
	if _, err := New(DefaultConfig(), Deps{Tokenizer: defaultTok(t), Registry: prometheus.NewRegistry()}); !errors.Is(err, ErrConfig) {
		t.Errorf("no instance source: got %v", err)
	}
}

// Instances the index stops listing leave the fleet and the router's memory.
func TestInstancesLeave(t *testing.T) {
	idx, es := threeEngines(t)
	r, _ := testRouter(t, DefaultConfig(), idx, defaultTok(t))
	fleetReady(t, r, 3)
	gone := es[1].info()
	gone.routable = false
	idx.setInstance(gone)
	fleetReady(t, r, 2)
	r.mu.Lock()
	_, kept := r.instances[gone.id]
	r.mu.Unlock()
	if kept {
		t.Fatal("departed instance still tracked")
	}
	for i := range 10 {
		if rep := post(t, r.URL(), "/v1/chat/completions", chatBody(longText(i, 20), "q", "")); rep.code != 200 || rep.instance == gone.id {
			t.Fatal("routed to a departed instance")
		}
	}
}
