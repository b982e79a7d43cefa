package router_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/router"
	"github.com/kvroute/kvroute/tokenizer"
)

// A router composed in process the way `kvroute router` does it: NATS, the index fed by
// the agents' events, the embedded tokenizer, one registry for everything.
func ExampleNew() {
	ctx := context.Background()
	srv, _ := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	defer srv.Shutdown()
	nc, _ := natsutil.Connect(natsutil.ClientConfig{URL: srv.ClientURL(), Name: "example"})
	defer nc.Close()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)

	idx, _ := indexer.New(indexer.DefaultConfig(), nc, reg, log)
	_ = idx.Start(ctx)
	defer idx.Close()
	tok, _ := tokenizer.Default()

	cfg := router.DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0" // or "" and serve r.Handler() yourself
	cfg.Policy = router.PolicyKVAware
	r, err := router.New(cfg, router.Deps{NATS: nc, Index: idx, Tokenizer: tok, Registry: reg, Log: log})
	if err != nil {
		panic(err)
	}
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer r.Close()

	resp, err := http.Get(r.URL() + "/readyz") // no agent has announced an engine yet
	if err == nil {
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output: 503
}
