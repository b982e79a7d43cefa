package deploy

import "strings"

// metricKind is a Prometheus metric type, which decides the series names a metric exposes.
type metricKind int

const (
	counter metricKind = iota
	gauge
	histogram
)

// metricDef is one metric of the contract between kvroute's components and its dashboards:
// its type and its own labels (target labels come on top).
type metricDef struct {
	kind   metricKind
	labels []string
}

// contractMetrics are the metric names of notes/contracts.md: what the router, the index, the
// agent and the simulator (vLLM's own names) register. The rules and the dashboard may use
// these, and the series the rules record, and nothing else.
var contractMetrics = map[string]metricDef{
	// router
	"kvroute_router_requests_total":                {counter, []string{"decision", "model", "code"}},
	"kvroute_router_routing_duration_seconds":      {histogram, nil},
	"kvroute_router_predicted_cached_tokens_total": {counter, nil},
	"kvroute_router_engine_cached_tokens_total":    {counter, nil},
	"kvroute_router_prediction_error_tokens":       {histogram, nil},
	"kvroute_router_ttft_seconds":                  {histogram, []string{"instance"}},
	"kvroute_router_in_flight":                     {gauge, []string{"instance"}},
	"kvroute_router_overflow_ratio":                {gauge, nil},
	"kvroute_router_upstream_errors_total":         {counter, []string{"instance", "kind"}},
	"kvroute_router_retries_total":                 {counter, nil},
	"kvroute_router_instance_ejected":              {gauge, []string{"instance"}},
	// index
	"kvroute_index_keys":                    {gauge, nil},
	"kvroute_index_entries":                 {gauge, nil},
	"kvroute_index_instance_blocks":         {gauge, []string{"instance"}},
	"kvroute_index_events_applied_total":    {counter, nil},
	"kvroute_index_gaps_total":              {counter, nil},
	"kvroute_index_snapshots_total":         {counter, nil},
	"kvroute_index_lookup_duration_seconds": {histogram, nil},
	"kvroute_index_evictions_total":         {counter, nil},
	"kvroute_index_ingestion_lag_seconds":   {histogram, nil},
	"kvroute_index_instance_state":          {gauge, []string{"instance", "state"}},
	"kvroute_index_instance_hit_rate":       {gauge, []string{"instance"}},
	"kvroute_index_fleet_hit_rate":          {gauge, nil},
	"kvroute_index_instance_warmup_seconds": {gauge, []string{"instance"}},
	// agent
	"kvroute_agent_batches_received_total":   {counter, nil},
	"kvroute_agent_events_received_total":    {counter, []string{"type"}},
	"kvroute_agent_batches_published_total":  {counter, nil},
	"kvroute_agent_decode_errors_total":      {counter, nil},
	"kvroute_agent_gaps_total":               {counter, nil},
	"kvroute_agent_replays_total":            {counter, nil},
	"kvroute_agent_resyncs_total":            {counter, nil},
	"kvroute_agent_orphans_total":            {counter, nil},
	"kvroute_agent_keys_held":                {gauge, nil},
	"kvroute_agent_publish_duration_seconds": {histogram, nil},
	"kvroute_agent_engine_up":                {gauge, nil},
	// vLLM (and the simulator, which exports vLLM's names)
	"vllm:num_requests_running":        {gauge, []string{"model_name", "engine"}},
	"vllm:num_requests_waiting":        {gauge, []string{"model_name", "engine"}},
	"vllm:kv_cache_usage_perc":         {gauge, []string{"model_name", "engine"}},
	"vllm:prefix_cache_queries_total":  {counter, []string{"model_name", "engine"}},
	"vllm:prefix_cache_hits_total":     {counter, []string{"model_name", "engine"}},
	"vllm:time_to_first_token_seconds": {histogram, []string{"model_name", "engine"}},
}

// targetLabels are attached by Prometheus and prometheus-operator to every scraped series.
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// labelValues are the closed sets of values of some contract labels.
var labelValues = map[string][]string{
	"decision": {"cache_hit", "affinity", "overflow", "random", "least_request"},
	"state":    {"joining", "syncing", "ready", "stale", "gone"},
}

// series resolves a series name (a metric, or a histogram's _bucket/_sum/_count series) to its
// contract metric and the labels it carries.
func series(name string) (def metricDef, labels []string, ok bool) {
	if d, found := contractMetrics[name]; found && d.kind != histogram {
		return d, append(append([]string{}, d.labels...), targetLabels...), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, cut := strings.CutSuffix(name, suffix)
		if !cut {
			continue
		}
		d, found := contractMetrics[base]
		if !found || d.kind != histogram {
			continue
		}
		labels = append(append([]string{}, d.labels...), targetLabels...)
		if suffix == "_bucket" {
			labels = append(labels, "le")
		}
		return d, labels, true
	}
	return metricDef{}, nil, false
}

// knownLabels is every label any contract series can carry.
func knownLabels() map[string]bool {
	out := map[string]bool{"le": true}
	for _, l := range targetLabels {
		out[l] = true
	}
	for _, d := range contractMetrics {
		for _, l := range d.labels {
			out[l] = true
		}
	}
	return out
}

// commonFlags are the flags every kvroute server subcommand has (cmd/kvroute/common.go, and
// the root's persistent --config).
var commonFlags = []string{
	"config", "help", "listen", "grpc-listen", "metrics-listen", "log-level", "log-format",
	"nats", "nats-creds", "nats-user", "nats-password", "nats-token", "nats-tls-ca", "nats-tls-cert",
	"nats-tls-key", "nats-embedded-host", "nats-embedded-port",
}

// subcommandFlags are the flags of the subcommands the manifests run: the agent's from its
// --help, the router's and the indexer's from the issues' texts (not built yet). cmd/kvroute is package main, so its cobra tree cannot be imported here;
// TestManifestFlagsExistInBinary (not in -short) builds the binary and checks the real --help.
var subcommandFlags = map[string][]string{
	"router": {
		"engines", "policy", "concurrency-threshold", "prefix-length", "prefix-length-bytes", "tokenizer",
		"group-header", "min-match-tokens", "pending-ttl", "debug-headers",
	},
	"agent": {
		// as `kvroute agent --help` lists them (agent landed)
		"engine-url", "zmq-endpoint", "zmq-bind", "zmq-replay-endpoint", "topic", "dp-rank", "instance-id",
		"model", "block-size", "heartbeat-interval", "coalesce-window", "engine-timeout", "min-resync-interval",
		"models-refresh-interval", "replay-timeout", "snapshot-chunk-keys",
	},
	"indexer": {"max-keys", "instance-ttl"},
}

// staticFlags returns the flag set of a subcommand from the lists above.
func staticFlags(sub string) (map[string]bool, bool) {
	extra, ok := subcommandFlags[sub]
	if !ok {
		return nil, false
	}
	out := map[string]bool{}
	for _, f := range commonFlags {
		out[f] = true
	}
	for _, f := range extra {
		out[f] = true
	}
	return out, true
}
