// Package sim is a vLLM-compatible engine simulator: kvroute's test and benchmark
// backend where no GPU exists.
//
// A Server speaks vLLM's OpenAI HTTP API (/v1/chat/completions, /v1/completions with
// SSE streaming, /v1/models, /tokenize, /detokenize, /reset_prefix_cache, /metrics with
// vLLM's metric names, /health) and runs the parts of vLLM v1 that routing depends on:
//
//   - a prefix cache like vLLM's KV cache manager: a fixed pool of GPU blocks, full
//     blocks hashed by vLLM's sha256_cbor chain, reference counts, least-recently-used
//     eviction of free blocks, the longest cached prefix reused;
//   - a continuous-batching step loop like vLLM v1's scheduler (decode first, then
//     first-come-first-served admission under max-num-seqs and a token budget with
//     chunked prefill, recompute preemption), each step's duration taken from a cost
//     model and slept scaled by Config.TimeScale;
//   - the KV-event stream byte for byte like vLLM: a ZMQ PUB of msgpack batches in map
//     or legacy array form, and the replay ROUTER socket;
//   - fault injection (dropped or stopped events, restarts, slow steps, failed requests,
//     cut streams).
//
// Several Servers can run in one process: each has its own registry, mux and sockets;
// the package has no globals. It must not depend on any other kvroute component than
// the shared vocabularies (kvblock for the test oracle, tokenizer, internal/openai), and
// it must not pretend: every figure it reports comes from its own bookkeeping.
package sim
