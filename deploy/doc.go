// Package deploy is kvroute's deployment kit: Kubernetes manifests (k8s/, applied with
// `kubectl apply -k deploy/k8s`), the Grafana dashboard (grafana/), the Prometheus alert and
// recording rules (prometheus/) and the container image (docker/Dockerfile).
//
// The package has no code of its own; its tests are the kit's build: they decode every manifest
// strictly into the Kubernetes and prometheus-operator API types, check that what the manifests
// name exists (files, ports, selectors, ConfigMaps, environment variables, kvroute's and NATS's
// flags and their value types, vLLM's KV-events settings), parse every PromQL expression of the
// rules and the dashboard and check each metric, label and filtered label value against what
// kvroute's components really export, and check the Dockerfile against go.mod. Without -short,
// the metrics come from a live in-process fleet (internal/fleet) and the flags from the built
// binary's --help; both are recorded in testdata/golden/ (-update), which `go test -short`
// checks against. A typo anywhere in deploy/ fails `make test`.
//
// It must not be imported, and nothing in it runs in the kvroute binary.
package deploy
