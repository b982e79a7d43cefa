package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// promql checks PromQL expressions against a catalog of the metric families kvroute's
// components export (a live fleet's, or the golden file written from one) and the series
// recorded by rules. recorded maps a recorded series name to its expression.
type promql struct {
	parser   parser.Parser
	cat      *catalog
	recorded map[string]parser.Expr
	known    map[string]bool
}

func newPromQL(cat *catalog) *promql {
	return &promql{parser: parser.NewParser(parser.Options{}), cat: cat, recorded: map[string]parser.Expr{}, known: cat.knownLabels()}
}

// grafanaVarMark stands in for a Grafana template variable in an expression: a label value
// that contains it is the user's choice, not a value to look up.
const grafanaVarMark = "grafana_variable_"

// check parses expr and returns every problem: a parse error, a metric no component exports,
// a label a metric does not carry, a label value no component exports, a grouping or
// matching label no series has. The returned expression is nil when it does not parse.
func (p *promql) check(expr string) (parser.Expr, []error) {
	e, err := p.parser.ParseExpr(expr)
	if err != nil {
		return nil, []error{fmt.Errorf("promql %q: %w", oneLine(expr), err)}
	}
	var errs []error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			errs = append(errs, p.checkSelector(n)...)
		case *parser.AggregateExpr:
			in := p.outputLabels(n.Expr)
			for _, l := range n.Grouping {
				switch {
				case !p.known[l]:
					errs = append(errs, fmt.Errorf("promql %q: grouping label %q is on no kvroute series", oneLine(expr), l))
				case in != nil && !slices.Contains(in, l):
					errs = append(errs, fmt.Errorf("promql %q: grouping label %q is not on the series %s aggregates (they carry %s)", oneLine(expr), l, n.Op, strings.Join(in, ", ")))
				}
			}
		case *parser.BinaryExpr:
			errs = append(errs, p.checkMatching(expr, n)...)
		}
		return nil
	})
	return e, errs
}

// checkMatching checks the labels of on(), ignoring() and group_left/group_right(): on()
// labels must be on both sides, ignoring() labels on one, and the labels group_x copies on
// the "one" side.
func (p *promql) checkMatching(expr string, n *parser.BinaryExpr) []error {
	vm := n.VectorMatching
	if vm == nil || n.LHS.Type() != parser.ValueTypeVector || n.RHS.Type() != parser.ValueTypeVector {
		return nil
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("promql %q: %s", oneLine(expr), fmt.Sprintf(format, args...)))
	}
	lhs, rhs := p.outputLabels(n.LHS), p.outputLabels(n.RHS)
	on := func(side []string, l string) bool { return side == nil || slices.Contains(side, l) }
	for _, l := range slices.Concat(vm.MatchingLabels, vm.Include) {
		if !p.known[l] {
			fail("matching label %q is on no kvroute series", l)
		}
	}
	for _, l := range vm.MatchingLabels {
		switch {
		case !p.known[l]:
		case vm.On && (!on(lhs, l) || !on(rhs, l)):
			fail("on (%s): the left side carries %v, the right side %v", l, lhs, rhs)
		case !vm.On && !on(lhs, l) && !on(rhs, l):
			fail("ignoring (%s): neither side carries it", l)
		}
	}
	one, group := rhs, "group_left"
	if vm.Card == parser.CardOneToMany {
		one, group = lhs, "group_right"
	}
	for _, l := range vm.Include {
		if p.known[l] && !on(one, l) {
			fail("%s (%s): the one side carries only %v", group, l, one)
		}
	}
	return errs
}

func (p *promql) checkSelector(vs *parser.VectorSelector) []error {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	if name == "" {
		return []error{fmt.Errorf("selector %s has no metric name", vs)}
	}
	if _, ok := p.recorded[name]; ok {
		return nil // a recorded series: its labels are checked where it is recorded
	}
	base, allowed, ok := p.cat.series(name)
	if !ok {
		return []error{fmt.Errorf("metric %q is exported by no kvroute component (%s) nor recorded by a rule", name, p.cat.origin)}
	}
	fam := p.cat.families[base]
	var errs []error
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName {
			continue
		}
		if !slices.Contains(allowed, m.Name) {
			errs = append(errs, fmt.Errorf("metric %q has no label %q (it has %s)", name, m.Name, strings.Join(allowed, ", ")))
			continue
		}
		if !fam.labels[m.Name] || slices.Contains(identityLabels, m.Name) || strings.Contains(m.Value, grafanaVarMark) {
			continue // a target label, an identity, or the user's choice
		}
		seen := sortedKeys(fam.values[m.Name])
		switch m.Type {
		case labels.MatchEqual:
			if !slices.Contains(seen, m.Value) {
				errs = append(errs, fmt.Errorf("metric %q: label %s=%q: %s exports no such value (it has %s)", name, m.Name, m.Value, p.cat.origin, quoteAll(seen)))
			}
		case labels.MatchRegexp:
			if !slices.ContainsFunc(seen, m.Matches) {
				errs = append(errs, fmt.Errorf("metric %q: label %s=~%q matches no value %s exports (it has %s)", name, m.Name, m.Value, p.cat.origin, quoteAll(seen)))
			}
		}
	}
	return errs
}

func quoteAll(vals []string) string {
	if len(vals) == 0 {
		return "none"
	}
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// outputLabels returns the labels the series of expr carry, or nil when they cannot be known
// (then nothing is checked against them).
func (p *promql) outputLabels(e parser.Expr) []string {
	switch e := e.(type) {
	case *parser.ParenExpr:
		return p.outputLabels(e.Expr)
	case *parser.StepInvariantExpr:
		return p.outputLabels(e.Expr)
	case *parser.NumberLiteral:
		return []string{}
	case *parser.AggregateExpr:
		if e.Without {
			return nil
		}
		return append([]string{}, e.Grouping...)
	case *parser.MatrixSelector:
		return p.outputLabels(e.VectorSelector)
	case *parser.SubqueryExpr:
		return p.outputLabels(e.Expr)
	case *parser.VectorSelector:
		if rec, ok := p.recorded[e.Name]; ok {
			return p.outputLabels(rec)
		}
		if _, ls, ok := p.cat.series(e.Name); ok {
			return ls
		}
		return nil
	case *parser.Call:
		if e.Func.Name == "histogram_quantile" && len(e.Args) == 2 {
			ls := p.outputLabels(e.Args[1])
			if ls == nil {
				return nil
			}
			return slices.DeleteFunc(ls, func(l string) bool { return l == "le" })
		}
		for _, a := range e.Args {
			if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
				return p.outputLabels(a)
			}
		}
		return nil
	case *parser.BinaryExpr:
		lt, rt := e.LHS.Type(), e.RHS.Type()
		switch {
		case lt == parser.ValueTypeScalar && rt == parser.ValueTypeScalar:
			return []string{}
		case lt == parser.ValueTypeScalar:
			return p.outputLabels(e.RHS)
		case rt == parser.ValueTypeScalar:
			return p.outputLabels(e.LHS)
		}
		vm := e.VectorMatching
		if vm != nil && vm.Card == parser.CardOneToMany {
			return append(p.outputLabels(e.RHS), vm.Include...)
		}
		ls := p.outputLabels(e.LHS)
		switch {
		case vm == nil || ls == nil:
		case vm.Card == parser.CardManyToOne:
			ls = append(ls, vm.Include...)
		case vm.Card == parser.CardOneToOne && vm.On: // the result keeps the on() labels only
			ls = slices.DeleteFunc(ls, func(l string) bool { return !slices.Contains(vm.MatchingLabels, l) })
		case vm.Card == parser.CardOneToOne: // and loses the ignored ones
			ls = slices.DeleteFunc(ls, func(l string) bool { return slices.Contains(vm.MatchingLabels, l) })
		}
		return ls
	}
	return nil
}

// templateLabelRE finds label references in alert templates ({{ $labels.x }}) and in Grafana
// legends ({{x}}).
var (
	alertLabelRE  = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	legendLabelRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// checkLabelRefs reports each label referenced by re in text that expr's series do not carry.
func (p *promql) checkLabelRefs(e parser.Expr, text string, re *regexp.Regexp, what string) []error {
	out := p.outputLabels(e)
	if out == nil {
		return nil
	}
	var errs []error
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if !slices.Contains(out, m[1]) {
			sort.Strings(out)
			errs = append(errs, fmt.Errorf("%s uses label %q but the expression's series carry only [%s]", what, m[1], strings.Join(out, " ")))
		}
	}
	return errs
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// checkerFixture is a small exposition in Prometheus's text format: the metric checker's unit
// tests run against it (the kit's own files run against the golden file and the live fleet).
const checkerFixture = `# TYPE kvroute_router_requests_total counter
kvroute_router_requests_total{decision="cache_hit",model="m",code="200"} 3
kvroute_router_requests_total{decision="affinity",model="m",code="500"} 1
# TYPE kvroute_router_in_flight gauge
kvroute_router_in_flight{instance="engine-0"} 0
# TYPE kvroute_router_instance_ejected gauge
kvroute_router_instance_ejected{instance="engine-0"} 0
# TYPE kvroute_index_keys gauge
kvroute_index_keys 10
# TYPE kvroute_index_instance_state gauge
kvroute_index_instance_state{instance="engine-0",state="ready"} 1
kvroute_index_instance_state{instance="engine-0",state="stale"} 0
# TYPE kvroute_router_ttft_seconds histogram
kvroute_router_ttft_seconds_bucket{instance="engine-0",le="0.1"} 1
kvroute_router_ttft_seconds_bucket{instance="engine-0",le="+Inf"} 1
kvroute_router_ttft_seconds_sum{instance="engine-0"} 0.05
kvroute_router_ttft_seconds_count{instance="engine-0"} 1
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m",engine="0"} 5
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m",engine="0"} 9
`

func fixtureCatalog(t *testing.T) *catalog {
	t.Helper()
	c := newCatalog("the fixture")
	if err := c.addExposition(strings.NewReader(checkerFixture), ""); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPromQLChecker shows what the checker catches, on expressions with one mistake each.
func TestPromQLChecker(t *testing.T) {
	p := newPromQL(fixtureCatalog(t))
	bad := map[string]string{
		`sum(rate(kvroute_router_request_total[5m]))`:                             `metric "kvroute_router_request_total" is exported by no kvroute component (the fixture)`,
		`kvroute_router_in_flight{instanse="a"}`:                                  `has no label "instanse"`,
		`sum by (decison) (rate(kvroute_router_requests_total[5m]))`:              `grouping label "decison"`,
		`sum(rate(kvroute_router_requests_total{decision="cachehit"}[5m]))`:       `label decision="cachehit": the fixture exports no such value (it has "affinity", "cache_hit")`,
		`sum(rate(kvroute_router_requests_total{code=~"4.."}[5m]))`:               `label code=~"4.." matches no value`,
		`histogram_quantile(0.9, rate(kvroute_index_keys_bucket[5m]))`:            `metric "kvroute_index_keys_bucket" is exported by no kvroute component`,
		`rate(kvroute_router_ttft_seconds_bucket_count[5m])`:                      `metric "kvroute_router_ttft_seconds_bucket_count" is exported by no kvroute component`,
		`sum(rate(kvroute_router_requests_total[5m])`:                             `unclosed left parenthesis`,
		`kvroute_router_in_flight / on (instnce) kvroute_router_instance_ejected`: `matching label "instnce"`,
		`max by (instance) (kvroute_index_instance_state{state="syncing"})`:       `label state="syncing": the fixture exports no such value`,
	}
	for expr, want := range bad {
		_, errs := p.check(expr)
		if !containsErr(errs, want) {
			t.Errorf("check(%q) = %v, want an error containing %q", expr, errs, want)
		}
	}
	good := []string{
		`histogram_quantile(0.99, sum by (le, instance) (rate(kvroute_router_ttft_seconds_bucket{namespace="x"}[5m])))`,
		`sum(rate(vllm:prefix_cache_hits_total[5m])) / sum(rate(vllm:prefix_cache_queries_total[5m]))`,
		`max by (instance) (kvroute_index_instance_state{state="stale"}) == 1`,
		`sum(rate(kvroute_router_requests_total{code=~"5..", decision!="nonsense"}[5m]))`,
		// identity labels and Grafana variables may take any value
		`kvroute_router_in_flight{instance="engine-9"} + on (instance) kvroute_router_instance_ejected{instance=~"` + grafanaVarMark + `instance"}`,
		`rate(kvroute_router_ttft_seconds_count{pod="p"}[5m])`,
	}
	for _, expr := range good {
		if _, errs := p.check(expr); len(errs) > 0 {
			t.Errorf("check(%q) = %v, want no error", expr, errs)
		}
	}
	e, _ := p.check(`max by (namespace, instance) (kvroute_index_instance_state{state="stale"}) == 1`)
	if errs := p.checkLabelRefs(e, "{{ $labels.instance }} of {{ $labels.pod }}", alertLabelRE, "alert"); !containsErr(errs, `uses label "pod"`) {
		t.Errorf("checkLabelRefs: got %v, want an error about label pod", errs)
	}
	e, _ = p.check(`histogram_quantile(0.5, sum by (instance, le) (rate(kvroute_router_ttft_seconds_bucket[5m])))`)
	if errs := p.checkLabelRefs(e, "{{instance}}", legendLabelRE, "legend"); len(errs) > 0 {
		t.Errorf("checkLabelRefs: %v", errs)
	}
	if errs := p.checkLabelRefs(e, "{{le}}", legendLabelRE, "legend"); !containsErr(errs, `uses label "le"`) {
		t.Errorf("checkLabelRefs: got %v, want an error about label le", errs)
	}
}

func containsErr(errs []error, substr string) bool {
	for _, err := range errs {
		if strings.Contains(err.Error(), substr) {
			return true
		}
	}
	return false
}
