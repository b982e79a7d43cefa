// Package router is kvroute's OpenAI-compatible reverse proxy for vLLM fleets. For each
// request it parses the body once (internal/openai), computes the prompt's block keys
// (package kvblock) from the exact prompt tokens, asks the prefix-block index once which
// instances hold the longest prefix, and runs a chain of small policies — cache hit, then
// hash affinity bounded by load, then overflow to the least-loaded instance — before
// relaying the request and its response (SSE chunk by chunk) to the chosen engine.
//
// The router also keeps a short-lived pending overlay (keys it just sent to an instance
// count as held there until the engine's events confirm them), learns every instance's
// prefill rate from observed time to first token, ejects failing instances, and shares
// its in-flight counts with other replicas over NATS so the concurrency threshold holds
// fleet-wide. Optionally (Config.PrewarmPrefixes) it tracks the hottest prompt prefixes
// it routed and replays them, max_tokens=1, to an instance that newly appears before that
// instance takes real traffic.
//
// It must not keep the index itself (package indexer does), decode engine events, or log
// prompt text. Several Routers may live in one process: nothing here is global, and every
// metric goes to the injected registry.
package router
