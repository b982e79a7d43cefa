// Package indexer is kvroute's fleet-wide prefix-block index: which engine instance holds
// which block key (see package kvblock), and, for a request's key chain, how many leading
// blocks each instance already caches.
//
// It has three layers:
//   - Index, the core data structure (BlockIndex implements it; NewInstrumented wraps any
//     Index with Prometheus metrics). Its contract — behaviour, thread safety and cost — is
//     documented on the interface and checked by one shared test suite.
//   - Service, which feeds an Index from the agents' NATS subjects (kvroutev1.SubjectEvents,
//     kvroutev1.SubjectHeartbeat): it applies each instance's batches in (epoch, seq) order,
//     asks the agent for a snapshot after a gap or lost history, tracks instance states
//     (joining, syncing, ready, stale, gone) and warm-up, and removes silent instances.
//   - GRPCServer, the kvroutev1.Index gRPC API over a Service.
//
// The package must not route requests, talk to engines, or compute keys from engine
// hashes: it only stores the keys the agents publish and answers lookups.
package indexer
