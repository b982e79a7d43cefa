package kvblock_test

import (
	"fmt"

	"github.com/kvroute/kvroute/kvblock"
)

// The router and the agent compute the same keys: the router from a request's prompt
// tokens, the agent from the token_ids of the engine's BlockStored events, chaining each
// block from its parent's key.
func Example() {
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} // two full blocks of 4, and a partial one
	seed := kvblock.Seed("Qwen/Qwen3-0.6B", "", "")

	keys := kvblock.Keys(nil, seed, tokens, 4) // router side
	fmt.Println(len(keys), "keys")

	first := kvblock.Extend(seed, tokens[0:4]) // agent side, block by block
	second := kvblock.Extend(first, tokens[4:8])
	fmt.Println(keys[0] == first, keys[1] == second)

	salted := kvblock.Keys(nil, kvblock.Seed("Qwen/Qwen3-0.6B", "", "tenant-a"), tokens, 4)
	fmt.Println(salted[0] == keys[0])
	// Output:
	// 2 keys
	// true true
	// false
}
