package deploy

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// kustomizationRoots are the directories applied with `kubectl apply -k`.
var kustomizationRoots = []string{"k8s", "k8s/indexer"}

// loadKit loads every kustomization root and returns them merged (the base with the optional
// indexer), failing the test on any load error.
func loadKit(t *testing.T) *bundle {
	t.Helper()
	all := newBundle()
	for _, root := range kustomizationRoots {
		b, errs := loadKustomization(root)
		for _, err := range errs {
			t.Error(err)
		}
		all.objects = append(all.objects, b.objects...)
		for k, v := range b.configMaps {
			all.configMaps[k] = v
		}
		for k, v := range b.commented {
			all.commented[k] = v
		}
		for k := range b.images {
			all.images[k] = true
		}
	}
	return all
}

// TestKustomizationsComplete: every kustomization directory under deploy/ is a root or is
// listed by one, and (checked while loading) lists every file beside it.
func TestKustomizationsComplete(t *testing.T) {
	loadKit(t)
	reached := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		reached[filepath.Clean(dir)] = true
		b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			return
		}
		var k kustomization
		if err := yamlUnmarshalStrict(b, &k); err != nil {
			return
		}
		for _, r := range k.Resources {
			if fi, err := os.Stat(filepath.Join(dir, r)); err == nil && fi.IsDir() {
				walk(filepath.Join(dir, r))
			}
		}
	}
	for _, r := range kustomizationRoots {
		walk(r)
	}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() && isKustomizationDir(path) && !reached[filepath.Clean(path)] {
			t.Errorf("%s has a kustomization.yaml that no root in kustomizationRoots reaches", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestManifests decodes every manifest strictly and runs every cross-check on the real kit.
func TestManifests(t *testing.T) {
	b := loadKit(t)
	kinds := map[string]int{}
	for _, o := range b.objects {
		kinds[kindOf(o.obj)]++
	}
	t.Logf("decoded %d objects: %v; generated ConfigMaps %v", len(b.objects), kinds, sortedKeys(b.configMaps))
	for _, want := range []string{"Namespace", "Deployment", "Service", "ServiceMonitor", "PrometheusRule", "PodDisruptionBudget"} {
		if kinds[want] == 0 {
			t.Errorf("the kit has no %s", want)
		}
	}
	checks := map[string][]error{
		"objects": checkObjects(b),
		"flags":   checkKvrouteFlags(b, goldenFlags(t)),
		"nats":    checkNATSServers(b),
		"engines": checkEngines(b),
	}
	for _, name := range sortedKeys(checks) {
		for _, err := range checks[name] {
			t.Errorf("%s: %v", name, err)
		}
	}

	// What the issue asks of the kit, beyond well-formedness.
	router := deployment(t, b, "kvroute-router")
	if router.Spec.Replicas == nil || *router.Spec.Replicas != 2 {
		t.Errorf("router replicas = %v, want 2", router.Spec.Replicas)
	}
	rc := router.Spec.Template.Spec.Containers[0]
	if rc.ReadinessProbe == nil || rc.ReadinessProbe.HTTPGet == nil || rc.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("router readinessProbe must GET /readyz")
	}
	if rc.LivenessProbe == nil || rc.LivenessProbe.HTTPGet == nil || rc.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("router livenessProbe must GET /healthz")
	}
	if len(rc.EnvFrom) == 0 || rc.EnvFrom[0].ConfigMapRef == nil {
		t.Errorf("router takes its configuration from a ConfigMap (envFrom)")
	}
	engines := deployment(t, b, "vllm")
	if n := len(engines.Spec.Template.Spec.Containers); n != 2 {
		t.Errorf("vllm pod has %d containers, want vLLM and the agent sidecar", n)
	}
	deployment(t, b, "nats")
	deployment(t, b, "kvroute-indexer")
	// A ServiceMonitor for every metrics port: each Service port named *metrics or serving
	// vLLM's /metrics (http on the engine) is scraped.
	scraped := map[string]bool{}
	for _, o := range b.objects {
		if sm, ok := o.obj.(*monitoringv1.ServiceMonitor); ok {
			for _, s := range b.services() {
				if labelsMatch(sm.Spec.Selector.MatchLabels, s.Labels) {
					for _, ep := range sm.Spec.Endpoints {
						scraped[s.Name+"/"+ep.Port] = true
					}
				}
			}
		}
	}
	for _, s := range b.services() {
		for _, p := range s.Spec.Ports {
			if strings.HasSuffix(p.Name, "metrics") && !scraped[s.Name+"/"+p.Name] {
				t.Errorf("Service %s port %s is not scraped by any ServiceMonitor", s.Name, p.Name)
			}
		}
	}
	if !scraped["vllm/http"] {
		t.Errorf("vLLM's own /metrics (Service vllm port http) is not scraped")
	}
	if _, ok := b.configMaps["kvroute-grafana-dashboard"]["kvroute-dashboard.json"]; !ok {
		t.Errorf("the Grafana dashboard is not generated as a ConfigMap")
	}
}

func deployment(t *testing.T, b *bundle, name string) *appsv1.Deployment {
	t.Helper()
	for _, o := range b.objects {
		if d, ok := o.obj.(*appsv1.Deployment); ok && d.Name == name {
			return d
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

func labelsMatch(sel, set map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if set[k] != v {
			return false
		}
	}
	return true
}

// TestBadManifests runs the checks on manifests with one mistake each (testdata/bad/*.yaml,
// whose first line says "# want: <part of the error>").
func TestBadManifests(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/bad/*.yaml: %v", err)
	}
	sort.Strings(files)
	flagsOf := goldenFlags(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(raw), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("first line %q is not '# want: ...'", first)
			}
			b := newBundle()
			b.configMaps["kvroute-router"] = map[string]string{"KVROUTE_NATS": "nats://nats:4222"}
			objs, derr := decodeManifests(f, raw)
			var errs []error
			if derr != nil {
				errs = append(errs, derr)
			}
			for _, o := range objs {
				b.objects = append(b.objects, object{file: f, obj: o})
			}
			errs = append(errs, checkObjects(b)...)
			errs = append(errs, checkKvrouteFlags(b, flagsOf)...)
			errs = append(errs, checkNATSServers(b)...)
			errs = append(errs, checkEngines(b)...)
			if !containsErr(errs, want) {
				t.Errorf("errors %v\nwant one containing %q", errs, want)
			}
			t.Logf("caught: %q", want)
		})
	}
}

// TestEnvFileParsing: the env-file reader that feeds the flag checks.
func TestEnvFileParsing(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "x.env")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kv, commented, err := readEnvFile(write("# intro text\nKVROUTE_A=1\n\n# KVROUTE_B=  later\nKVROUTE_C=x=y\n"))
	if err != nil || kv["KVROUTE_A"] != "1" || kv["KVROUTE_C"] != "x=y" || len(kv) != 2 || len(commented) != 1 || commented[0] != "KVROUTE_B" {
		t.Errorf("readEnvFile = %v %v %v", kv, commented, err)
	}
	if _, _, err := readEnvFile(write("KVROUTE_A=1\nKVROUTE_A=2\n")); err == nil || !strings.Contains(err.Error(), "set twice") {
		t.Errorf("duplicate key: err = %v", err)
	}
	if _, _, err := readEnvFile(write("not a pair\n")); err == nil || !strings.Contains(err.Error(), "not KEY=VALUE") {
		t.Errorf("bad line: err = %v", err)
	}
}

// TestVarRefs: $(VAR) expansion as Kubernetes does it, $$ escaping.
func TestVarRefs(t *testing.T) {
	got := varRefs("http://$(POD_IP):8000/$$(NOT)/$(B)")
	if len(got) != 2 || got[0] != "POD_IP" || got[1] != "B" {
		t.Errorf("varRefs = %v", got)
	}
}
