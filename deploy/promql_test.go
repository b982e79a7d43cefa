package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// promql checks PromQL expressions against the metric contract and the series recorded by
// rules. recorded maps a recorded series name to its expression.
type promql struct {
	parser   parser.Parser
	recorded map[string]parser.Expr
	known    map[string]bool
}

func newPromQL() *promql {
	return &promql{parser: parser.NewParser(parser.Options{}), recorded: map[string]parser.Expr{}, known: knownLabels()}
}

// check parses expr and returns every problem: a parse error, a metric outside the contract, a
// label a metric does not carry, a label value outside its closed set, a grouping label no series
// has. The returned expression is nil when it does not parse.
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
			for _, l := range n.Grouping {
				if !p.known[l] {
					errs = append(errs, fmt.Errorf("promql %q: grouping label %q is on no kvroute series", oneLine(expr), l))
				}
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				for _, l := range slices.Concat(n.VectorMatching.MatchingLabels, n.VectorMatching.Include) {
					if !p.known[l] {
						errs = append(errs, fmt.Errorf("promql %q: matching label %q is on no kvroute series", oneLine(expr), l))
					}
				}
			}
		}
		return nil
	})
	return e, errs
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
	var allowed []string
	if _, ok := p.recorded[name]; ok {
		allowed = nil // a recorded series: its labels are checked where it is recorded
	} else if _, ls, ok := series(name); ok {
		allowed = ls
	} else {
		return []error{fmt.Errorf("metric %q is not in the metric contract (nor recorded by a rule)", name)}
	}
	var errs []error
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName {
			continue
		}
		if allowed != nil && !slices.Contains(allowed, m.Name) {
			errs = append(errs, fmt.Errorf("metric %q has no label %q (it has %s)", name, m.Name, strings.Join(allowed, ", ")))
			continue
		}
		if vals, closed := labelValues[m.Name]; closed && m.Type == labels.MatchEqual && !slices.Contains(vals, m.Value) {
			errs = append(errs, fmt.Errorf("metric %q: label %s=%q is not one of %s", name, m.Name, m.Value, strings.Join(vals, ", ")))
		}
	}
	return errs
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
		if _, ls, ok := series(e.Name); ok {
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
		if vm != nil && vm.Card == parser.CardManyToOne {
			ls = append(ls, vm.Include...)
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

// TestPromQLChecker shows what the checker catches, on expressions with one mistake each.
func TestPromQLChecker(t *testing.T) {
	p := newPromQL()
	bad := map[string]string{
		`sum(rate(kvroute_router_request_total[5m]))`:                             `metric "kvroute_router_request_total" is not in the metric contract`,
		`kvroute_router_in_flight{instanse="a"}`:                                  `has no label "instanse"`,
		`sum by (decison) (rate(kvroute_router_requests_total[5m]))`:              `grouping label "decison"`,
		`sum(rate(kvroute_router_requests_total{decision="cachehit"}[5m]))`:       `label decision="cachehit" is not one of`,
		`histogram_quantile(0.9, rate(kvroute_index_keys_bucket[5m]))`:            `metric "kvroute_index_keys_bucket" is not in the metric contract`,
		`sum(rate(kvroute_router_requests_total[5m])`:                             `unclosed left parenthesis`,
		`kvroute_router_in_flight / on (instnce) kvroute_router_instance_ejected`: `matching label "instnce"`,
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
