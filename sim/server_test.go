package sim

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Several sims share a process: separate ports, caches, registries and event streams.
func TestSeveralServersInOneProcess(t *testing.T) {
	a, b := startServer(t, testConfig()), startServer(t, testConfig())
	if a.URL() == b.URL() || a.EventsEndpoint() == b.EventsEndpoint() || a.ReplayEndpoint() == b.ReplayEndpoint() {
		t.Fatalf("shared addresses: %s %s / %s %s", a.URL(), b.URL(), a.EventsEndpoint(), b.EventsEndpoint())
	}
	generate(t, a, seqTokens(1, 64), "", "", 1)
	if len(a.KVBlockKeys()) == 0 || len(b.KVBlockKeys()) != 0 {
		t.Fatalf("caches leak: a %d b %d", len(a.KVBlockKeys()), len(b.KVBlockKeys()))
	}
	if a.Registry() == b.Registry() {
		t.Fatal("servers share a registry")
	}
}

func TestServerLifecycle(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(testConfig(), nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.URL() != "" {
		t.Fatalf("URL before Start: %q", s.URL())
	}
	if _, err := s.Generate(context.Background(), []uint32{1}, "", "", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Generate before Start: %v", err)
	}
	// The injected registry receives the metrics too.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range mfs {
		found = found || m.GetName() == "vllm:kv_cache_usage_perc"
	}
	if !found {
		t.Fatal("injected registry lacks vllm:kv_cache_usage_perc")
	}
	// A second server of the same model cannot share that registry.
	if _, err := New(testConfig(), nil, reg, nil); err == nil {
		t.Fatal("two servers registered the same metrics on one registry")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err == nil {
		t.Fatal("second Start succeeded")
	}
	if _, err := s.Generate(context.Background(), nil, "", "", 1); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty prompt: %v", err)
	}
	cancel() // cancelling Start's context closes the server
	eventually(t, "the server to close", func() bool {
		_, err := s.Generate(context.Background(), []uint32{1}, "", "", 1)
		return errors.Is(err, ErrClosed)
	})
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

// Close ends requests in flight promptly with ErrClosed.
func TestCloseFailsRequestsInFlight(t *testing.T) {
	cfg := testConfig()
	cfg.TimeScale = 1
	s, err := New(cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Generate(context.Background(), seqTokens(1, 32), "", "", 5000) // ~10 s
		errc <- err
	}()
	eventually(t, "the request to run", func() bool { running, _, _ := s.Load(); return running == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("in-flight request: %v, want ErrClosed", err)
	}
}
