package bench_test

import (
	"fmt"

	"github.com/kvroute/kvroute/bench"
)

// A seeded workload is the same trace on every run; its requests are streaming OpenAI chat bodies.
func ExampleGenerate() {
	wc, _ := bench.DefaultWorkload(bench.WorkloadScaleOut)
	wc.Requests, wc.DocTokens = 30, 100
	tr, err := bench.Generate(wc, bench.NewText())
	if err != nil {
		panic(err)
	}
	fmt.Println(tr.Workload, len(tr.Requests), "requests on", tr.Engines, "engines, then", tr.Joins[0].Engines, "more after", tr.Joins[0].AfterRequests)
	// Output: scale-out 30 requests on 4 engines, then 3 more after 15
}

// The oracle is the hit rate of an unbounded prefix cache on the prompts in order.
func ExampleOracle() {
	doc := make([]uint32, 64) // 4 blocks of 16 tokens shared by both prompts
	for i := range doc {
		doc[i] = uint32(i)
	}
	a := append(append([]uint32(nil), doc...), 1000, 1001)
	b := append(append([]uint32(nil), doc...), 2000, 2001)
	res := bench.Oracle([]bench.Prompt{{Seed: 1, IDs: a}, {Seed: 1, IDs: b}}, 16)
	fmt.Printf("hits %d of %d tokens (%.3f)\n", res.HitTokens, res.QueryTokens, res.HitRate())
	// Output: hits 64 of 132 tokens (0.485)
}
