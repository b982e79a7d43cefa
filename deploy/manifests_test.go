package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

type monitoringPrometheusRule = monitoringv1.PrometheusRule

// scheme knows every kind the kit may contain; anything else fails to decode.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strictDecoder decodes YAML into the registered API types; unknown and duplicate fields are
// errors, as with `kubectl apply --validate=strict`.
var strictDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})

// decodeManifestFile decodes every document of a YAML file.
func decodeManifestFile(path string) ([]runtime.Object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeManifests(path, raw)
}

func decodeManifests(name string, raw []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []runtime.Object
	var errs []error
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if isEmptyYAML(doc) {
			continue
		}
		obj, gvk, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			what := "document " + fmt.Sprint(i)
			if gvk != nil {
				what += " (" + gvk.Kind + ")"
			}
			errs = append(errs, fmt.Errorf("%s: %s: %w", name, what, err))
			continue
		}
		out = append(out, obj)
	}
	return out, errors.Join(errs...)
}

func isEmptyYAML(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && line != "---" {
			return false
		}
	}
	return true
}

// kustomization holds the fields of kustomize.config.k8s.io/v1beta1 Kustomization that the kit
// uses. Decoded strictly: a field this test does not know is an error, so a new kustomize
// feature in the kit comes with its check here.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Resources          []string `json:"resources,omitempty"`
	ConfigMapGenerator []struct {
		Name     string   `json:"name"`
		Envs     []string `json:"envs,omitempty"`
		Files    []string `json:"files,omitempty"`
		Literals []string `json:"literals,omitempty"`
		Options  *struct {
			DisableNameSuffixHash bool              `json:"disableNameSuffixHash,omitempty"`
			Labels                map[string]string `json:"labels,omitempty"`
			Annotations           map[string]string `json:"annotations,omitempty"`
		} `json:"options,omitempty"`
	} `json:"configMapGenerator,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// bundle is what `kustomize build` of a directory would produce, as typed objects.
type bundle struct {
	objects []object
	// configMaps are the generated ConfigMaps, by name; commented holds, per env-file generated
	// ConfigMap, the keys of commented-out KEY= lines (documented options, checked like set ones).
	configMaps map[string]map[string]string
	commented  map[string][]string
	// images are the image names an images: transformer rewrites.
	images map[string]bool
}

type object struct {
	file string
	obj  runtime.Object
}

func newBundle() *bundle {
	return &bundle{configMaps: map[string]map[string]string{}, commented: map[string][]string{}, images: map[string]bool{}}
}

// loadKustomization loads dir's kustomization and, recursively, the directories it lists.
// Besides decoding errors it reports listed paths that do not exist and files of dir that no
// field lists.
func loadKustomization(dir string) (*bundle, []error) {
	b := newBundle()
	errs := b.addKustomization(dir)
	return b, errs
}

func (b *bundle) addKustomization(dir string) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	kpath := filepath.Join(dir, "kustomization.yaml")
	raw, err := os.ReadFile(kpath)
	if err != nil {
		return []error{err}
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		return []error{fmt.Errorf("%s: %w", kpath, err)}
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		fail("%s: apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", kpath, k.APIVersion, k.Kind)
	}
	listed := map[string]bool{"kustomization.yaml": true}
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		fi, err := os.Stat(p)
		if err != nil {
			fail("%s: resource %s: %v", kpath, r, err)
			continue
		}
		listed[filepath.Clean(r)] = true
		if fi.IsDir() {
			errs = append(errs, b.addKustomization(p)...)
			continue
		}
		objs, err := decodeManifestFile(p)
		if err != nil {
			errs = append(errs, err)
		}
		for _, o := range objs {
			b.objects = append(b.objects, object{file: p, obj: o})
		}
	}
	for _, g := range k.ConfigMapGenerator {
		data := map[string]string{}
		for _, env := range g.Envs {
			listed[filepath.Clean(env)] = true
			kv, commented, err := readEnvFile(filepath.Join(dir, env))
			if err != nil {
				errs = append(errs, err)
			}
			for key, v := range kv {
				data[key] = v
			}
			b.commented[g.Name] = append(b.commented[g.Name], commented...)
		}
		for _, f := range g.Files {
			listed[filepath.Clean(f)] = true
			content, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				fail("%s: configMapGenerator %s: %v", kpath, g.Name, err)
			}
			data[filepath.Base(f)] = string(content)
		}
		for _, lit := range g.Literals {
			key, v, ok := strings.Cut(lit, "=")
			if !ok {
				fail("%s: configMapGenerator %s: literal %q is not KEY=VALUE", kpath, g.Name, lit)
			}
			data[key] = v
		}
		if _, dup := b.configMaps[g.Name]; dup {
			fail("%s: ConfigMap %s generated twice", kpath, g.Name)
		}
		b.configMaps[g.Name] = data
	}
	for _, im := range k.Images {
		b.images[im.Name] = true
		if im.NewTag == "" && im.Digest == "" {
			fail("%s: image %s: set newTag or digest", kpath, im.Name)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return append(errs, err)
	}
	for _, e := range entries {
		if !listed[e.Name()] && !(e.IsDir() && isKustomizationDir(filepath.Join(dir, e.Name()))) {
			fail("%s: %s is in the directory but not listed in kustomization.yaml", dir, e.Name())
		}
	}
	return errs
}

func isKustomizationDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "kustomization.yaml"))
	return err == nil
}

// readEnvFile reads a kustomize env file: KEY=VALUE lines, # comments, blank lines. A comment
// of the form "# KEY=..." documents an option left at its default; its key is returned too.
func readEnvFile(path string) (map[string]string, []string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	kv := map[string]string{}
	var commented []string
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "#"); ok {
			if key, _, ok := strings.Cut(strings.TrimSpace(rest), "="); ok && isEnvName(key) {
				commented = append(commented, key)
			}
			continue
		}
		key, v, ok := strings.Cut(line, "=")
		if !ok || !isEnvName(key) {
			return nil, nil, fmt.Errorf("%s:%d: %q is not KEY=VALUE", path, i+1, line)
		}
		if _, dup := kv[key]; dup {
			return nil, nil, fmt.Errorf("%s:%d: %s set twice", path, i+1, key)
		}
		kv[key] = v
	}
	return kv, commented, nil
}

func isEnvName(s string) bool {
	return s != "" && len(validation.IsEnvVarName(s)) == 0 && !strings.ContainsAny(s, " \t")
}

// podSpecs returns the pod templates of the bundle's workloads, keyed by "Kind/name".
func (b *bundle) podSpecs() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, o := range b.objects {
		if d, ok := o.obj.(*appsv1.Deployment); ok {
			out["Deployment/"+d.Name] = &d.Spec.Template
		}
	}
	return out
}

func (b *bundle) services() []*corev1.Service {
	var out []*corev1.Service
	for _, o := range b.objects {
		if s, ok := o.obj.(*corev1.Service); ok {
			out = append(out, s)
		}
	}
	return out
}

// podsOf returns the pod templates a label selector set matches.
func (b *bundle) podsOf(sel map[string]string) []*corev1.PodTemplateSpec {
	if len(sel) == 0 {
		return nil
	}
	s := labels.SelectorFromSet(sel)
	var out []*corev1.PodTemplateSpec
	keys := sortedKeys(b.podSpecs())
	for _, k := range keys {
		p := b.podSpecs()[k]
		if s.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

// containerPort finds the container exposing a port (by name or number) in a pod.
func containerPort(p *corev1.PodTemplateSpec, port intstr.IntOrString) (*corev1.Container, *corev1.ContainerPort) {
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		for j := range c.Ports {
			cp := &c.Ports[j]
			if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
				return c, cp
			}
		}
	}
	return nil, nil
}

// checkObjects checks names, labels, selectors, ports, probes and references across objects.
func checkObjects(b *bundle) []error {
	var errs []error
	fail := func(o object, format string, args ...any) {
		m, _ := meta(o.obj)
		errs = append(errs, fmt.Errorf("%s: %s %s: %s", o.file, kindOf(o.obj), m.GetName(), fmt.Sprintf(format, args...)))
	}
	seen := map[string]string{}
	for _, o := range b.objects {
		m, err := meta(o.obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.file, err))
			continue
		}
		id := kindOf(o.obj) + "/" + m.GetName()
		if prev, dup := seen[id]; dup {
			fail(o, "defined twice (also in %s)", prev)
		}
		seen[id] = o.file
		for _, msg := range validation.IsDNS1123Subdomain(m.GetName()) {
			fail(o, "name: %s", msg)
		}
		for k, v := range m.GetLabels() {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				fail(o, "label %s=%s: %s", k, v, msg)
			}
		}
		switch x := o.obj.(type) {
		case *appsv1.Deployment:
			sel, err := metav1.LabelSelectorAsSelector(x.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(x.Spec.Template.Labels)) {
				fail(o, "selector %v does not match its pod template's labels %v", x.Spec.Selector, x.Spec.Template.Labels)
			}
			errs = append(errs, checkPod(o, &x.Spec.Template, b)...)
		case *corev1.Service:
			pods := b.podsOf(x.Spec.Selector)
			if len(pods) == 0 {
				fail(o, "selector %v matches no pod template", x.Spec.Selector)
			}
			for _, sp := range x.Spec.Ports {
				for _, msg := range validation.IsValidPortName(sp.Name) {
					fail(o, "port name %q: %s", sp.Name, msg)
				}
				for _, p := range pods {
					if c, _ := containerPort(p, sp.TargetPort); c == nil {
						fail(o, "port %s: targetPort %s is on no container of the pods it selects", sp.Name, sp.TargetPort.String())
					}
				}
			}
		case *policyv1.PodDisruptionBudget:
			sel, err := metav1.LabelSelectorAsSelector(x.Spec.Selector)
			if err != nil || len(b.podsOfSelector(sel)) == 0 {
				fail(o, "selector %v matches no pod template", x.Spec.Selector)
			}
		case *monitoringv1.ServiceMonitor:
			errs = append(errs, checkServiceMonitor(o, x, b)...)
		}
	}
	return errs
}

func (b *bundle) podsOfSelector(sel labels.Selector) []*corev1.PodTemplateSpec {
	var out []*corev1.PodTemplateSpec
	for _, p := range b.podSpecs() {
		if !sel.Empty() && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

// checkPod checks one pod template: container and port names, probes on declared ports,
// volumes, ConfigMap references, $(VAR) references, image tags.
func checkPod(o object, p *corev1.PodTemplateSpec, b *bundle) []error {
	var errs []error
	m, _ := meta(o.obj)
	fail := func(c string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s %s container %s: %s", o.file, kindOf(o.obj), m.GetName(), c, fmt.Sprintf(format, args...)))
	}
	volumes := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		volumes[v.Name] = true
		if v.ConfigMap != nil && b.configMaps[v.ConfigMap.Name] == nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional) {
			fail("-", "volume %s: ConfigMap %s is not generated", v.Name, v.ConfigMap.Name)
		}
	}
	ports := map[string]bool{}
	for _, c := range p.Spec.Containers {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			fail(c.Name, "name: %s", msg)
		}
		if !b.images[c.Image] {
			if name, tag, ok := strings.Cut(lastPathPart(c.Image), ":"); !ok || tag == "" || tag == "latest" || name == "" {
				fail(c.Name, "image %q: pin a tag (or list it under images: in kustomization.yaml)", c.Image)
			}
		}
		for _, cp := range c.Ports {
			for _, msg := range validation.IsValidPortName(cp.Name) {
				fail(c.Name, "port name %q: %s", cp.Name, msg)
			}
			if ports[cp.Name] {
				fail(c.Name, "port name %q used twice in the pod", cp.Name)
			}
			ports[cp.Name] = true
		}
		for _, pr := range []struct {
			name  string
			probe *corev1.Probe
		}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}} {
			if pr.probe == nil {
				continue
			}
			var port intstr.IntOrString
			switch h := pr.probe.ProbeHandler; {
			case h.HTTPGet != nil:
				port = h.HTTPGet.Port
			case h.TCPSocket != nil:
				port = h.TCPSocket.Port
			case h.GRPC != nil:
				port = intstr.FromInt32(h.GRPC.Port)
			default:
				continue
			}
			if owner, _ := containerPort(&corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}, port); owner == nil {
				fail(c.Name, "%s: port %s is not a port of this container", pr.name, port.String())
			}
		}
		for _, vm := range c.VolumeMounts {
			if !volumes[vm.Name] {
				fail(c.Name, "volumeMount %s: no such volume", vm.Name)
			}
		}
		defined := map[string]bool{}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				data, ok := b.configMaps[ef.ConfigMapRef.Name]
				if !ok && (ef.ConfigMapRef.Optional == nil || !*ef.ConfigMapRef.Optional) {
					fail(c.Name, "envFrom: ConfigMap %s is not generated", ef.ConfigMapRef.Name)
				}
				for k := range data {
					defined[ef.Prefix+k] = true
				}
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				ref := e.ValueFrom.ConfigMapKeyRef
				if _, ok := b.configMaps[ref.Name][ref.Key]; !ok && (ref.Optional == nil || !*ref.Optional) {
					fail(c.Name, "env %s: ConfigMap key %s/%s does not exist", e.Name, ref.Name, ref.Key)
				}
			}
			for _, v := range varRefs(e.Value) {
				if !defined[v] {
					fail(c.Name, "env %s: $(%s) is not defined before it (Kubernetes would pass it literally)", e.Name, v)
				}
			}
			defined[e.Name] = true
		}
		for _, s := range slices.Concat(c.Command, c.Args) {
			for _, v := range varRefs(s) {
				if !defined[v] {
					fail(c.Name, "argument %q: $(%s) is not a variable of the container (Kubernetes would pass it literally)", s, v)
				}
			}
		}
	}
	return errs
}

func lastPathPart(image string) string {
	if i := strings.LastIndex(image, "/"); i >= 0 {
		return image[i+1:]
	}
	return image
}

// varRefs returns the names in $(NAME) references; $$(...) is an escape.
func varRefs(s string) []string {
	var out []string
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '$' && s[i+1] == '$' {
			i++
			continue
		}
		if s[i] == '$' && s[i+1] == '(' {
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				out = append(out, s[i+2:i+2+end])
				i += end + 2
			}
		}
	}
	return out
}

// checkServiceMonitor: the selector matches a Service, each endpoint names a port of it, and an
// endpoint that scrapes a kvroute router or indexer honours labels (their series carry an
// `instance` label of their own).
func checkServiceMonitor(o object, sm *monitoringv1.ServiceMonitor, b *bundle) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: ServiceMonitor %s: %s", o.file, sm.Name, fmt.Sprintf(format, args...)))
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || sel.Empty() {
		fail("selector %v: %v", sm.Spec.Selector, err)
		return errs
	}
	var svcs []*corev1.Service
	for _, s := range b.services() {
		if sel.Matches(labels.Set(s.Labels)) {
			svcs = append(svcs, s)
		}
	}
	if len(svcs) == 0 {
		fail("selector %v matches no Service", sm.Spec.Selector)
	}
	if len(sm.Spec.Endpoints) == 0 {
		fail("no endpoints")
	}
	for _, ep := range sm.Spec.Endpoints {
		if ep.Port == "" {
			fail("endpoint without a port name")
			continue
		}
		for _, s := range svcs {
			var sp *corev1.ServicePort
			for i := range s.Spec.Ports {
				if s.Spec.Ports[i].Name == ep.Port {
					sp = &s.Spec.Ports[i]
				}
			}
			if sp == nil {
				fail("endpoint port %q is not a port of Service %s", ep.Port, s.Name)
				continue
			}
			for _, p := range b.podsOf(s.Spec.Selector) {
				c, _ := containerPort(p, sp.TargetPort)
				if c == nil || len(c.Args) == 0 || !b.isKvroute(c) {
					continue
				}
				if sub := c.Args[0]; (sub == "router" || sub == "indexer") && !ep.HonorLabels {
					fail("endpoint %q scrapes a kvroute %s: set honorLabels: true, or its `instance` label becomes exported_instance", ep.Port, sub)
				}
			}
		}
	}
	return errs
}

// isKvroute says whether a container runs the kvroute image.
func (b *bundle) isKvroute(c *corev1.Container) bool {
	return c.Image == "kvroute" || strings.HasSuffix(strings.SplitN(c.Image, ":", 2)[0], "/kvroute")
}

func meta(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

func kindOf(obj runtime.Object) string {
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return fmt.Sprintf("%T", obj)
	}
	return gvks[0].Kind
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// rulesFromPrometheusRule converts a PrometheusRule's groups to the rule-file form.
func rulesFromPrometheusRule(pr *monitoringv1.PrometheusRule) ([]ruleGroup, error) {
	var out []ruleGroup
	for _, g := range pr.Spec.Groups {
		rg := ruleGroup{Name: g.Name, Labels: g.Labels}
		if g.Interval != nil {
			rg.Interval = string(*g.Interval)
		}
		if g.QueryOffset != nil {
			rg.QueryOffset = string(*g.QueryOffset)
		}
		if g.Limit != nil {
			rg.Limit = *g.Limit
		}
		for _, r := range g.Rules {
			if r.Expr.Type != intstr.String {
				return nil, fmt.Errorf("group %s: rule %s%s: expr is not a string", g.Name, r.Record, r.Alert)
			}
			nr := rule{Record: r.Record, Alert: r.Alert, Expr: r.Expr.StrVal, Labels: r.Labels, Annotations: r.Annotations}
			if r.For != nil {
				nr.For = string(*r.For)
			}
			if r.KeepFiringFor != nil {
				nr.KeepFiringFor = string(*r.KeepFiringFor)
			}
			rg.Rules = append(rg.Rules, nr)
		}
		out = append(out, rg)
	}
	return out, nil
}

func yamlUnmarshalStrict(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) }
