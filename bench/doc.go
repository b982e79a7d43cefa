// Package bench is kvroute's benchmark: it runs the real stack — an embedded NATS server,
// N simulated vLLM engines (package sim) with their agents (package agent), the prefix-block
// index (package indexer) and the router (package router) over real HTTP — once per routing
// policy on the same seeded trace (the stack is internal/fleet's composition, the one
// `kvroute demo` runs), with fresh caches each time, and reports TTFT, the
// engines' own prefix-cache hit rate against the oracle bound, throughput, overflow ratio,
// routing overhead and warm-up time as a markdown table, JSON and one self-contained HTML
// file of charts.
//
// The package generates workloads (shared-prefix, multiturn, scale-out, hot-prefix) from a
// seed, replays JSONL traces, and drives them open-loop (Poisson arrivals) or closed-loop
// (fixed concurrency). Everything it reports is measured during the run: it must not tune a
// workload to a target, invent a figure, or reach into a component's internals for a result
// that the component's public API, metrics or HTTP responses do not give.
package bench
