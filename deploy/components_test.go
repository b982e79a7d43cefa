package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// kvrouteContainer is a container running the kvroute binary, with its effective flags.
type kvrouteContainer struct {
	where string
	pod   *corev1.PodTemplateSpec
	c     *corev1.Container
	sub   string
	// flags maps each flag set by args, env (KVROUTE_*) or envFrom to its value (args win);
	// documented holds flags named only in commented-out env-file lines.
	flags      map[string]string
	documented []string
	// spaced holds the flags whose value was the next argument (--flag VALUE), which pflag
	// does not do for a bool.
	spaced map[string]bool
}

// flagOfEnv maps KVROUTE_FOO_BAR to foo-bar (cmd/kvroute/config.go's envName, reversed).
func flagOfEnv(env string) (string, bool) {
	rest, ok := strings.CutPrefix(env, "KVROUTE_")
	if !ok || rest == "" {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-")), true
}

// kvrouteContainers finds the kvroute containers of the bundle and resolves their flags.
func (b *bundle) kvrouteContainers() ([]kvrouteContainer, []error) {
	var out []kvrouteContainer
	var errs []error
	pods := b.podSpecs()
	for _, name := range sortedKeys(pods) {
		p := pods[name]
		for i := range p.Spec.Containers {
			c := &p.Spec.Containers[i]
			if !b.isKvroute(c) {
				continue
			}
			kc := kvrouteContainer{where: name + " container " + c.Name, pod: p, c: c, flags: map[string]string{}, spaced: map[string]bool{}}
			fail := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("%s: %s", kc.where, fmt.Sprintf(format, args...)))
			}
			if len(c.Command) > 0 {
				fail("command %v overrides the image's entrypoint; give the subcommand in args", c.Command)
			}
			if len(c.Args) == 0 || strings.HasPrefix(c.Args[0], "-") {
				fail("args must start with the subcommand, got %v", c.Args)
				continue
			}
			kc.sub = c.Args[0]
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef == nil {
					continue
				}
				for k, v := range b.configMaps[ef.ConfigMapRef.Name] {
					if f, ok := flagOfEnv(ef.Prefix + k); ok {
						kc.flags[f] = v
					} else {
						fail("envFrom ConfigMap %s key %s is not KVROUTE_<FLAG>", ef.ConfigMapRef.Name, k)
					}
				}
				for _, k := range b.commented[ef.ConfigMapRef.Name] {
					if f, ok := flagOfEnv(ef.Prefix + k); ok {
						kc.documented = append(kc.documented, f)
					}
				}
			}
			for _, e := range c.Env {
				if f, ok := flagOfEnv(e.Name); ok {
					kc.flags[f] = e.Value
				}
			}
			args := c.Args[1:]
			for j := 0; j < len(args); j++ {
				a := args[j]
				name, ok := strings.CutPrefix(a, "--")
				if !ok || name == "" {
					fail("argument %q: a server subcommand takes flags only", a)
					continue
				}
				if n, v, hasValue := strings.Cut(name, "="); hasValue {
					kc.flags[n] = v
				} else if j+1 < len(args) && !strings.HasPrefix(args[j+1], "-") {
					kc.flags[name] = args[j+1]
					kc.spaced[name] = true
					j++
				} else {
					kc.flags[name] = "true"
				}
			}
			out = append(out, kc)
		}
	}
	return out, errs
}

// checkKvrouteFlags checks every kvroute container against the flags of its subcommand (from
// flagsOf: names and value types), and its listen addresses against its declared ports.
func checkKvrouteFlags(b *bundle, flagsOf func(sub string) (flagSet, bool)) []error {
	kcs, errs := b.kvrouteContainers()
	for _, kc := range kcs {
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", kc.where, fmt.Sprintf(format, args...)))
		}
		known, ok := flagsOf(kc.sub)
		if !ok {
			fail("kvroute has no subcommand %q here", kc.sub)
			continue
		}
		for _, f := range slices.Concat(sortedKeys(kc.flags), kc.documented) {
			typ, ok := known[f]
			if !ok {
				fail("kvroute %s has no flag --%s (set as --%s or KVROUTE_%s)", kc.sub, f, f, strings.ToUpper(strings.ReplaceAll(f, "-", "_")))
				continue
			}
			if typ == "bool" && kc.spaced[f] {
				fail("kvroute %s --%s is a bool flag: write --%s=%s (pflag takes a separate %q as a positional argument)", kc.sub, f, f, kc.flags[f], kc.flags[f])
				continue
			}
			if v, set := kc.flags[f]; set {
				if err := checkValue(typ, v); err != nil {
					fail("kvroute %s --%s: %v", kc.sub, f, err)
				}
			}
		}
		listenPorts := map[int32]string{}
		for _, f := range []string{"listen", "metrics-listen", "grpc-listen"} {
			addr, set := kc.flags[f]
			if !set || addr == "" {
				continue
			}
			_, port, err := net.SplitHostPort(addr)
			n, perr := strconv.ParseInt(port, 10, 32)
			if err != nil || perr != nil || n <= 0 {
				fail("--%s=%q is not HOST:PORT with a fixed port", f, addr)
				continue
			}
			listenPorts[int32(n)] = f
			if c, _ := containerPort(&corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{*kc.c}}}, intstr.FromInt32(int32(n))); c == nil {
				fail("--%s=%s: port %d is not a containerPort", f, addr, n)
			}
		}
		for _, cp := range kc.c.Ports {
			if _, ok := listenPorts[cp.ContainerPort]; !ok {
				fail("containerPort %s (%d) is not any --listen/--metrics-listen/--grpc-listen port", cp.Name, cp.ContainerPort)
			}
		}
		if u, set := kc.flags["nats"]; set && u != "embedded" {
			errs = append(errs, checkNATSURL(b, kc.where, u)...)
		}
	}
	return errs
}

// checkNATSURL: every URL of a --nats value names a Service of the bundle and one of its ports.
func checkNATSURL(b *bundle, where, value string) []error {
	var errs []error
	for _, raw := range strings.Split(value, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Scheme != "nats" && u.Scheme != "tls" || u.Port() == "" {
			errs = append(errs, fmt.Errorf("%s: --nats %q: want nats://SERVICE:PORT", where, raw))
			continue
		}
		svcName := strings.Split(u.Hostname(), ".")[0]
		found := false
		for _, s := range b.services() {
			if s.Name != svcName {
				continue
			}
			for _, sp := range s.Spec.Ports {
				if strconv.Itoa(int(sp.Port)) == u.Port() {
					found = true
				}
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s: --nats %q: no Service %s with port %s", where, raw, svcName, u.Port()))
		}
	}
	return errs
}

// goModVersion returns the version go.mod requires of a module, or the go directive for "go".
func goModVersion(module string) (string, error) {
	raw, err := os.ReadFile("../go.mod")
	if err != nil {
		return "", err
	}
	var re *regexp.Regexp
	if module == "go" {
		re = regexp.MustCompile(`(?m)^go (\S+)$`)
	} else {
		re = regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + ` (\S+)`)
	}
	m := re.FindSubmatch(raw)
	if m == nil {
		return "", fmt.Errorf("go.mod: %s not found", module)
	}
	return string(m[1]), nil
}

func majorMinor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// checkNATSServers parses each NATS container's args with nats-server's own flag parser, and
// checks the ports it will listen on against the declared ports, and its version against the
// nats-server kvroute is tested with (go.mod).
func checkNATSServers(b *bundle) []error {
	var errs []error
	pods := b.podSpecs()
	for _, name := range sortedKeys(pods) {
		for _, c := range pods[name].Spec.Containers {
			img := lastPathPart(c.Image)
			if !strings.HasPrefix(img, "nats:") {
				continue
			}
			fail := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("%s container %s: %s", name, c.Name, fmt.Sprintf(format, args...)))
			}
			fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			opts, err := server.ConfigureOptions(fs, c.Args, func() {}, func() {}, func() {})
			if err != nil {
				fail("nats-server rejects args %v: %v", c.Args, err)
				continue
			}
			ports := map[string]int32{}
			for _, cp := range c.Ports {
				ports[cp.Name] = cp.ContainerPort
			}
			if int32(opts.Port) != ports["client"] {
				fail("nats-server listens for clients on %d, containerPort client is %d", opts.Port, ports["client"])
			}
			if int32(opts.HTTPPort) != ports["monitor"] {
				fail("nats-server monitoring (/healthz) on %d, containerPort monitor is %d", opts.HTTPPort, ports["monitor"])
			}
			want, err := goModVersion("github.com/nats-io/nats-server/v2")
			if err != nil {
				fail("%v", err)
				continue
			}
			_, tag, _ := strings.Cut(img, ":")
			if majorMinor(tag) != majorMinor(want) {
				fail("image %s: kvroute is tested with nats-server %s (go.mod); use the same minor version", c.Image, want)
			}
		}
	}
	return errs
}

// kvEventsConfig is vLLM's --kv-events-config (vllm/config/kv_events.py), decoded strictly.
type kvEventsConfig struct {
	EnableKVCacheEvents bool   `json:"enable_kv_cache_events"`
	Publisher           string `json:"publisher"`
	Endpoint            string `json:"endpoint"`
	ReplayEndpoint      string `json:"replay_endpoint"`
	BufferSteps         int    `json:"buffer_steps"`
	HWM                 int    `json:"hwm"`
	MaxQueueSize        int    `json:"max_queue_size"`
	Topic               string `json:"topic"`
}

// vllmArgs splits a vLLM command line into positional arguments and --flag values.
func vllmArgs(args []string) (positional []string, flags map[string]string) {
	flags = map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			positional = append(positional, args[i])
			continue
		}
		if n, v, has := strings.Cut(name, "="); has {
			flags[n] = v
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			flags[name] = args[i+1]
			i++
		} else {
			flags[name] = ""
		}
	}
	return positional, flags
}

// checkEngines checks each vLLM pod: KV events on (zmq PUB bound, replay bound), prompt-token
// details on, and its kvroute agent sidecar dialling exactly those sockets with the same topic
// and advertising the engine's port.
func checkEngines(b *bundle) []error {
	var errs []error
	kcs, _ := b.kvrouteContainers()
	pods := b.podSpecs()
	for _, name := range sortedKeys(pods) {
		p := pods[name]
		for _, c := range p.Spec.Containers {
			if !slices.Contains(c.Command, "serve") && !strings.HasPrefix(lastPathPart(c.Image), "vllm-openai") {
				continue
			}
			fail := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("%s container %s: %s", name, c.Name, fmt.Sprintf(format, args...)))
			}
			positional, flags := vllmArgs(c.Args)
			if len(positional) != 1 {
				fail("want the model as the one positional argument of `vllm serve`, got %v", positional)
			}
			if _, ok := flags["enable-prompt-tokens-details"]; !ok {
				fail("--enable-prompt-tokens-details is required: the router compares usage.prompt_tokens_details.cached_tokens with its prediction")
			}
			port := flags["port"]
			if port == "" {
				port = "8000"
			}
			raw, ok := flags["kv-events-config"]
			if !ok {
				fail("--kv-events-config is missing: without KV events the index never learns what this engine caches")
				continue
			}
			var cfg kvEventsConfig
			dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				fail("--kv-events-config: %v", err)
				continue
			}
			if !cfg.EnableKVCacheEvents || cfg.Publisher != "zmq" {
				fail("--kv-events-config: want enable_kv_cache_events true and publisher zmq, got %v and %q", cfg.EnableKVCacheEvents, cfg.Publisher)
			}
			pubPort, err := boundPort(cfg.Endpoint)
			if err != nil {
				fail("--kv-events-config endpoint: %v", err)
			}
			replayPort, err := boundPort(cfg.ReplayEndpoint)
			if err != nil {
				fail("--kv-events-config replay_endpoint: %v (the agent needs replay to recover gaps)", err)
			}
			var agent *kvrouteContainer
			for i := range kcs {
				if kcs[i].pod == p && kcs[i].sub == "agent" {
					agent = &kcs[i]
				}
			}
			if agent == nil {
				fail("no kvroute agent sidecar in the pod")
				continue
			}
			want := map[string]string{
				"zmq-endpoint":        "tcp://127.0.0.1:" + pubPort,
				"zmq-replay-endpoint": "tcp://127.0.0.1:" + replayPort,
				"topic":               cfg.Topic,
			}
			for _, f := range sortedKeys(want) {
				if got := agent.flags[f]; got != want[f] && !(f == "topic" && got == "" && cfg.Topic == "") {
					fail("agent --%s=%q, want %q to match --kv-events-config", f, got, want[f])
				}
			}
			if agent.flags["zmq-bind"] == "true" {
				fail("agent --zmq-bind: vLLM binds %s, so the agent must dial", cfg.Endpoint)
			}
			if u, err := url.Parse(agent.flags["engine-url"]); err != nil || u.Port() != port {
				fail("agent --engine-url=%q: want the engine's port %s", agent.flags["engine-url"], port)
			}
			if agent.flags["instance-id"] == "" {
				fail("agent --instance-id is unset: every pod would derive the same id from the engine URL's host")
			}
		}
	}
	return errs
}

// boundPort checks a ZMQ endpoint that vLLM binds (tcp://*:PORT) and returns the port.
func boundPort(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://*:")
	if !ok {
		return "", fmt.Errorf("%q: want tcp://*:PORT, which vLLM binds (other hosts make vLLM dial out)", endpoint)
	}
	if n, err := strconv.Atoi(rest); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("%q: bad port", endpoint)
	}
	return rest, nil
}
