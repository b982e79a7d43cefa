package sim_test

import (
	"context"
	"fmt"

	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/sim"
)

// A simulated engine in-process: requests by token ids, the prefix cache they leave
// behind, and the oracle other components' tests compare with.
func Example() {
	cfg := sim.DefaultConfig() // tiny profile, ephemeral ports
	cfg.TimeScale = 0          // no sleeping: bookkeeping speed
	srv, err := sim.New(cfg, nil, nil, nil)
	if err != nil {
		panic(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		panic(err)
	}
	defer srv.Close()
	// srv.URL() serves the OpenAI API; srv.EventsEndpoint() and srv.ReplayEndpoint()
	// are the KV-event sockets an agent dials.

	prompt := make([]uint32, 100)
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	ctx := context.Background()
	first, _ := srv.Generate(ctx, prompt, "", "", 1)
	again, _ := srv.Generate(ctx, prompt, "", "", 1)
	fmt.Println("cached tokens:", first.CachedTokens, "then", again.CachedTokens)

	want := kvblock.Keys(nil, kvblock.Seed(cfg.Model, "", ""), prompt, cfg.BlockSize)
	fmt.Println("blocks cached:", len(srv.KVBlockKeys()), "of", len(want))
	// Output:
	// cached tokens: 0 then 96
	// blocks cached: 6 of 6
}
