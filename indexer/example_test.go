package indexer_test

import (
	"fmt"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/kvblock"
)

// A router computes a prompt's block keys and asks the index which instance holds the
// longest leading run of them.
func ExampleBlockIndex_Lookup() {
	idx, err := indexer.NewBlockIndex(indexer.BlockIndexConfig{MaxKeys: 1_000_000})
	if err != nil {
		panic(err)
	}
	prompt := make([]uint32, 64) // four blocks of 16 tokens
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}
	keys := kvblock.Keys(nil, kvblock.Seed("Qwen/Qwen3-0.6B", "", ""), prompt, kvblock.DefaultBlockSize)

	// What the agents reported: engine-a caches the whole prompt, engine-b its first half.
	_ = idx.Store("engine-a", keys)
	_ = idx.Store("engine-b", keys[:2])

	matches := idx.Lookup(keys, make([]indexer.Match, 0, 8))
	for _, m := range matches {
		fmt.Printf("%s: %d blocks (%d tokens)\n", m.Instance, m.Blocks, m.Blocks*kvblock.DefaultBlockSize)
	}
	// Output:
	// engine-a: 4 blocks (64 tokens)
	// engine-b: 2 blocks (32 tokens)
}
