// Package agent is kvroute's node agent: it runs beside one vLLM instance, reads the
// engine's KV-cache events from its ZMQ publisher, turns the engine's opaque block hashes
// into kvblock keys (chained from the parent's key, seeded by model, LoRA adapter and
// cache_salt), keeps a reference-counted mirror of the instance's cached keys and
// publishes the net changes of that mirror to NATS as kvroutev1.EventBatch messages. It
// repairs sequence gaps through the engine's replay socket, starts a new epoch when
// history is lost or the engine restarts, answers snapshot requests with its full key
// set, and sends load heartbeats scraped from the engine's /metrics.
//
// The package is split by concern: decode.go turns a msgpack payload into typed engine
// events (no transport, no state), mirror.go translates events into keys and net
// changes (no I/O), zmq.go is the ZMQ transport (SUB and replay DEALER), publish.go the
// NATS side (batches and snapshots), engine.go the engine's HTTP endpoints, agent.go
// ties them together with the sequence tracking.
//
// The agent must not guess: a block whose parent it does not know (an orphan), a
// multimodal block, a block of a non-GPU tier or of a non-main KV-cache group is never
// given a key, because a wrong key would make the router believe a cache is warm.
// It must not depend on how the engine computes its own hashes.
package agent
