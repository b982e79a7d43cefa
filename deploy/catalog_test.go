package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricsGolden is the catalog of metric families a live fleet exports, written by
// TestFleetMetrics with -update and checked against the live fleet by it (without -short).
// `go test -short` checks the rules and the dashboard against this file, so CI keeps every
// metric, label and label-value check without starting a fleet.
const metricsGolden = "testdata/golden/metrics.txt"

// targetLabels are attached by Prometheus and prometheus-operator to every scraped series;
// no kvroute component exports them, so no fleet can show them, and they stay a hand-kept
// list: job, instance (kvroute's router and indexer export their own `instance`, kept by
// honorLabels), namespace, pod, service, container and endpoint (prometheus-operator's
// ServiceMonitor relabelling).
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// identityLabels name things of one deployment (an instance id, a model, a vLLM engine
// index): their values in a test fleet say nothing about a production one, so the catalog
// does not record them and queries may filter on any value.
var identityLabels = []string{"instance", "model", "model_name", "engine"}

// fleetOnlyLabels are added by the in-process fleet and by no kvroute binary: fleet.Start
// registers every agent on one registry with a constant `agent` label, where a real
// `kvroute agent` is alone on its scrape target. They are dropped from a gathered catalog so
// that the dashboard cannot come to depend on them.
var fleetOnlyLabels = []string{"agent"}

// family is one metric family as exported: its type, its own label names, and the values
// seen for each label that is not an identity label.
type family struct {
	kind   string // counter, gauge, histogram, summary, untyped (expfmt's names, lower case)
	labels map[string]bool
	values map[string]map[string]bool
}

// catalog is every metric family the components export, from a live fleet or from the
// golden file; the PromQL checks resolve every series name, label and value against it.
type catalog struct {
	origin   string
	families map[string]*family
}

func newCatalog(origin string) *catalog {
	return &catalog{origin: origin, families: map[string]*family{}}
}

// add merges the families of one scrape into the catalog.
func (c *catalog) add(mfs map[string]*dto.MetricFamily) error {
	for name, mf := range mfs {
		kind := strings.ToLower(mf.GetType().String())
		f, ok := c.families[name]
		if !ok {
			f = &family{kind: kind, labels: map[string]bool{}, values: map[string]map[string]bool{}}
			c.families[name] = f
		} else if f.kind != kind {
			return fmt.Errorf("metric %s is a %s in one scrape and a %s in another", name, f.kind, kind)
		}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				l := lp.GetName()
				if slices.Contains(fleetOnlyLabels, l) {
					continue
				}
				f.labels[l] = true
				if !slices.Contains(identityLabels, l) {
					if f.values[l] == nil {
						f.values[l] = map[string]bool{}
					}
					f.values[l][lp.GetValue()] = true
				}
			}
		}
	}
	return nil
}

// addExposition parses one /metrics body in Prometheus's text format and adds its
// families, except those named skipPrefix... (none when empty).
func (c *catalog) addExposition(r io.Reader, skipPrefix string) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("parse exposition: %w", err)
	}
	for name := range mfs {
		if skipPrefix != "" && strings.HasPrefix(name, skipPrefix) {
			delete(mfs, name)
		}
	}
	return c.add(mfs)
}

// series resolves a series name — a metric, or a histogram's or summary's _bucket/_sum/_count
// series — to its family and the labels it carries (its own, the target labels, le/quantile).
func (c *catalog) series(name string) (base string, labels []string, ok bool) {
	own := func(f *family, extra ...string) []string {
		out := append(sortedKeys(f.labels), extra...)
		for _, l := range targetLabels {
			if !f.labels[l] {
				out = append(out, l)
			}
		}
		return out
	}
	if f, found := c.families[name]; found && f.kind != "histogram" {
		if f.kind == "summary" {
			return name, own(f, "quantile"), true
		}
		return name, own(f), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		b, cut := strings.CutSuffix(name, suffix)
		if !cut {
			continue
		}
		f, found := c.families[b]
		if !found || (f.kind != "histogram" && f.kind != "summary") || (suffix == "_bucket" && f.kind != "histogram") {
			continue
		}
		if suffix == "_bucket" {
			return b, own(f, "le"), true
		}
		return b, own(f), true
	}
	return "", nil, false
}

// knownLabels is every label any series can carry.
func (c *catalog) knownLabels() map[string]bool {
	out := map[string]bool{"le": true, "quantile": true}
	for _, l := range targetLabels {
		out[l] = true
	}
	for _, f := range c.families {
		for l := range f.labels {
			out[l] = true
		}
	}
	return out
}

// diff lists the differences in names, types and label names between c (expected) and got.
// Label values are not compared: which optional values a run produces may vary, and the
// values the rules and the dashboard filter on are checked against the live fleet itself.
func (c *catalog) diff(got *catalog) []string {
	var out []string
	for _, name := range sortedKeys(c.families) {
		w, g := c.families[name], got.families[name]
		switch {
		case g == nil:
			out = append(out, fmt.Sprintf("%s: in %s, not exported by %s", name, c.origin, got.origin))
		case w.kind != g.kind:
			out = append(out, fmt.Sprintf("%s: a %s in %s, a %s in %s", name, w.kind, c.origin, g.kind, got.origin))
		case !slices.Equal(sortedKeys(w.labels), sortedKeys(g.labels)):
			out = append(out, fmt.Sprintf("%s: labels %v in %s, %v in %s", name, sortedKeys(w.labels), c.origin, sortedKeys(g.labels), got.origin))
		}
	}
	for _, name := range sortedKeys(got.families) {
		if c.families[name] == nil {
			out = append(out, fmt.Sprintf("%s: exported by %s, not in %s", name, got.origin, c.origin))
		}
	}
	return out
}

// writeGolden renders the catalog in the golden file's format: one line per family
// ("name type label,label"), then one indented line per recorded label ("label: "v" "v"").
func (c *catalog) writeGolden() []byte {
	var b bytes.Buffer
	b.WriteString("# Metric families a live kvroute fleet exports (router, index, agents, simulated vLLM engines),\n")
	b.WriteString("# with the values seen for each non-identity label. Generated by\n")
	b.WriteString("#   go test ./deploy -run TestFleetMetrics -update\n")
	b.WriteString("# and checked against the live fleet by that test; `go test -short ./deploy` checks the rules and\n")
	b.WriteString("# the dashboard against this file. Do not edit.\n")
	for _, name := range sortedKeys(c.families) {
		f := c.families[name]
		fmt.Fprintf(&b, "%s %s", name, f.kind)
		if len(f.labels) > 0 {
			b.WriteString(" " + strings.Join(sortedKeys(f.labels), ","))
		}
		b.WriteString("\n")
		for _, l := range sortedKeys(f.values) {
			b.WriteString("\t" + l + ":")
			for _, v := range sortedKeys(f.values[l]) {
				b.WriteString(" " + strconv.Quote(v))
			}
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// readGolden parses writeGolden's format.
func readGolden(path string, raw []byte) (*catalog, error) {
	c := newCatalog(path)
	var cur *family
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", path, n, fmt.Sprintf(format, args...))
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "\t"):
			if cur == nil {
				return nil, fail("label values before any metric")
			}
			l, rest, ok := strings.Cut(strings.TrimPrefix(line, "\t"), ":")
			if !ok || !cur.labels[l] {
				return nil, fail("%q: want LABEL: \"value\" ... for a label of the metric", line)
			}
			vals := map[string]bool{}
			for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
				q, err := strconv.QuotedPrefix(rest)
				if err != nil {
					return nil, fail("%q: %v", line, err)
				}
				v, _ := strconv.Unquote(q)
				vals[v] = true
				rest = rest[len(q):]
			}
			cur.values[l] = vals
		default:
			fields := strings.Fields(line)
			if len(fields) < 2 || len(fields) > 3 {
				return nil, fail("%q: want NAME TYPE [LABEL,...]", line)
			}
			cur = &family{kind: fields[1], labels: map[string]bool{}, values: map[string]map[string]bool{}}
			if len(fields) == 3 {
				for _, l := range strings.Split(fields[2], ",") {
					cur.labels[l] = true
				}
			}
			if _, dup := c.families[fields[0]]; dup {
				return nil, fail("%s listed twice", fields[0])
			}
			c.families[fields[0]] = cur
		}
	}
	if len(c.families) == 0 {
		return nil, fmt.Errorf("%s: no metrics", path)
	}
	return c, sc.Err()
}

// goldenCatalog loads testdata/golden/metrics.txt.
func goldenCatalog(t *testing.T) *catalog {
	t.Helper()
	raw, err := os.ReadFile(metricsGolden)
	if err != nil {
		t.Fatalf("%v (generate it with `go test ./deploy -run TestFleetMetrics -update`)", err)
	}
	c, err := readGolden(metricsGolden, raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCatalogGolden: the golden format round-trips, and diff reports a missing family, a
// changed type or label set, and a new family.
func TestCatalogGolden(t *testing.T) {
	c := fixtureCatalog(t)
	back, err := readGolden("round trip", c.writeGolden())
	if err != nil {
		t.Fatal(err)
	}
	if d := c.diff(back); len(d) > 0 {
		t.Errorf("round trip differs: %v", d)
	}
	if got := sortedKeys(back.families["kvroute_router_requests_total"].values["decision"]); !slices.Equal(got, []string{"affinity", "cache_hit"}) {
		t.Errorf("decision values after the round trip: %v", got)
	}
	if _, ok := back.families["kvroute_router_in_flight"].values["instance"]; ok {
		t.Errorf("identity label instance has recorded values")
	}
	changed := newCatalog("the changed fleet")
	err = changed.addExposition(strings.NewReader(strings.NewReplacer(
		"# TYPE kvroute_index_keys gauge\nkvroute_index_keys 10\n", "",
		"kvroute_router_in_flight gauge", "kvroute_router_in_flight counter",
		`kvroute_router_instance_ejected{instance="engine-0"}`, `kvroute_router_instance_ejected{instance="engine-0",why="x"}`,
	).Replace(checkerFixture)+"# TYPE kvroute_new_total counter\nkvroute_new_total{agent=\"engine-0\"} 1\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	d := strings.Join(c.diff(changed), "\n")
	for _, want := range []string{
		"kvroute_index_keys: in the fixture, not exported by the changed fleet",
		"kvroute_router_in_flight: a gauge in the fixture, a counter in the changed fleet",
		"kvroute_router_instance_ejected: labels [instance] in the fixture, [instance why] in the changed fleet",
		"kvroute_new_total: exported by the changed fleet, not in the fixture",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("diff:\n%s\nwant a line %q", d, want)
		}
	}
	if l := changed.families["kvroute_new_total"].labels; len(l) != 0 {
		t.Errorf("the fleet-only agent label was kept: %v", l)
	}
	for _, bad := range []string{"x\n", "m gauge\n\tl: \"v\"\n", "\tl: \"v\"\n", "m gauge l\n\tl: v\n"} {
		if _, err := readGolden("bad", []byte(bad)); err == nil {
			t.Errorf("readGolden(%q): no error", bad)
		}
	}
}
