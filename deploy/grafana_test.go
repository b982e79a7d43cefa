package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

const dashboardFile = "grafana/kvroute-dashboard.json"

// dashboard is the part of Grafana's dashboard JSON model the kit uses; decoded strictly
// (panel options and field config are free-form per panel type and are left as raw JSON).
type dashboard struct {
	Title         string   `json:"title"`
	UID           string   `json:"uid"`
	Description   string   `json:"description"`
	Tags          []string `json:"tags"`
	Editable      bool     `json:"editable"`
	GraphTooltip  int      `json:"graphTooltip"`
	Refresh       string   `json:"refresh"`
	SchemaVersion int      `json:"schemaVersion"`
	Version       int      `json:"version"`
	Time          struct{ From, To string }
	Timepicker    json.RawMessage `json:"timepicker"`
	Timezone      string          `json:"timezone"`
	Annotations   json.RawMessage `json:"annotations"`
	Links         json.RawMessage `json:"links"`
	Templating    struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type templateVar struct {
	Name       string          `json:"name"`
	Label      string          `json:"label"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasourceRef  `json:"datasource"`
	Definition string          `json:"definition"`
	Current    json.RawMessage `json:"current"`
	Hide       int             `json:"hide"`
	Refresh    int             `json:"refresh"`
	Regex      string          `json:"regex"`
	Sort       int             `json:"sort"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Multi      bool            `json:"multi"`
	Options    json.RawMessage `json:"options"`
}

type panel struct {
	Type        string                   `json:"type"`
	ID          int                      `json:"id"`
	Title       string                   `json:"title"`
	Description string                   `json:"description"`
	Datasource  *datasourceRef           `json:"datasource"`
	GridPos     struct{ H, W, X, Y int } `json:"gridPos"`
	FieldConfig json.RawMessage          `json:"fieldConfig"`
	Options     json.RawMessage          `json:"options"`
	Targets     []struct {
		Datasource   *datasourceRef `json:"datasource"`
		RefID        string         `json:"refId"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
	} `json:"targets"`
	Collapsed bool    `json:"collapsed"`
	Panels    []panel `json:"panels"`
}

// dashboardMetrics are the metrics issue 8's panels need: per-instance cached blocks, hit rate,
// in-flight, TTFT; decision mix; overflow ratio; warm-up; event lag; routing overhead; index
// size; agent health.
var dashboardMetrics = []string{
	"kvroute_index_instance_blocks", "kvroute_index_instance_hit_rate", "kvroute_router_in_flight",
	"kvroute_router_ttft_seconds_bucket", "kvroute_router_requests_total", "kvroute_router_overflow_ratio",
	"kvroute_index_instance_warmup_seconds", "kvroute_index_ingestion_lag_seconds_bucket",
	"kvroute_router_routing_duration_seconds_bucket", "kvroute_index_keys", "kvroute_agent_engine_up",
	"kvroute_agent_decode_errors_total",
}

var (
	grafanaVarRE  = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}?`)
	labelValuesRE = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	// grafanaBuiltins stand for durations in range selectors; any value parses the same.
	grafanaBuiltins = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
)

func decodeDashboard(raw []byte) (*dashboard, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return &d, nil
}

// checkDashboard returns every problem of a dashboard and the metrics its queries use.
func checkDashboard(d *dashboard, p *promql) ([]error, map[string]bool) {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	used := map[string]bool{}
	if d.UID == "" || d.Title == "" {
		fail("dashboard: uid and title are required")
	}
	vars := map[string]bool{}
	dsVar := ""
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "datasource" {
			var q string
			if json.Unmarshal(v.Query, &q) != nil || q != "prometheus" {
				fail("dashboard: datasource variable %s: query %s, want \"prometheus\"", v.Name, v.Query)
			}
			dsVar = "${" + v.Name + "}"
		}
	}
	if dsVar == "" {
		fail("dashboard: no datasource variable")
	}
	// substitute replaces template variables by values that parse; unknown ones are errors.
	substitute := func(where, expr string) string {
		return grafanaVarRE.ReplaceAllStringFunc(expr, func(m string) string {
			name := grafanaVarRE.FindStringSubmatch(m)[1]
			if v, ok := grafanaBuiltins[name]; ok {
				return v
			}
			if !vars[name] {
				fail("%s: variable $%s is not defined", where, name)
			}
			return grafanaVarMark + name
		})
	}
	checkExpr := func(where, expr, legend string) {
		e, perrs := p.check(substitute(where, expr))
		for _, err := range perrs {
			fail("%s: %v", where, err)
		}
		if e == nil {
			return
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				used[vs.Name] = true
			}
			return nil
		})
		for _, err := range p.checkLabelRefs(e, legend, legendLabelRE, "legend "+legend) {
			fail("%s: %v", where, err)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query, RefID string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			fail("dashboard: variable %s: query: %v", v.Name, err)
			continue
		}
		m := labelValuesRE.FindStringSubmatch(q.Query)
		if m == nil {
			fail("dashboard: variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		checkExpr("dashboard: variable "+v.Name, m[1], "{{"+m[2]+"}}")
		if v.Datasource == nil || v.Datasource.UID != dsVar {
			fail("dashboard: variable %s does not use the datasource variable", v.Name)
		}
	}
	ids := map[int]bool{}
	var boxes []panel
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, pn := range ps {
			where := fmt.Sprintf("dashboard: panel %d %q", pn.ID, pn.Title)
			if pn.ID <= 0 || ids[pn.ID] {
				fail("%s: id missing or repeated", where)
			}
			ids[pn.ID] = true
			g := pn.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
				fail("%s: gridPos %+v outside the 24-column grid", where, g)
			}
			for _, o := range boxes {
				og := o.GridPos
				if g.X < og.X+og.W && og.X < g.X+g.W && g.Y < og.Y+og.H && og.Y < g.Y+g.H {
					fail("%s overlaps panel %d %q", where, o.ID, o.Title)
				}
			}
			boxes = append(boxes, pn)
			if pn.Type == "row" {
				walk(pn.Panels)
				continue
			}
			if pn.Datasource == nil || pn.Datasource.UID != dsVar {
				fail("%s: datasource must be %s", where, dsVar)
			}
			if len(pn.Targets) == 0 {
				fail("%s: no queries", where)
			}
			refs := map[string]bool{}
			for _, tg := range pn.Targets {
				if tg.RefID == "" || refs[tg.RefID] {
					fail("%s: refId missing or repeated", where)
				}
				refs[tg.RefID] = true
				if tg.Datasource == nil || tg.Datasource.UID != dsVar {
					fail("%s query %s: datasource must be %s", where, tg.RefID, dsVar)
				}
				checkExpr(fmt.Sprintf("%s query %s", where, tg.RefID), tg.Expr, tg.LegendFormat)
			}
		}
	}
	walk(d.Panels)
	return errs, used
}

func TestGrafanaDashboard(t *testing.T) {
	checkDashboardFile(t, goldenCatalog(t))
}

// checkDashboardFile checks the dashboard against cat, with the series the rules record.
func checkDashboardFile(t *testing.T, cat *catalog) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeDashboard(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, p := loadRules(t, cat) // the dashboard may use recorded series
	errs, used := checkDashboard(d, p)
	for _, err := range errs {
		t.Error(err)
	}
	for _, m := range dashboardMetrics {
		if !used[m] {
			t.Errorf("dashboard: no panel uses %s", m)
		}
	}
	t.Logf("%d panels, %d metrics used, checked against %s", len(d.Panels), len(used), cat.origin)
}

// TestGrafanaCheckerCatches: dashboards with one mistake each.
func TestGrafanaCheckerCatches(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, old, new, want string }{
		{"metric typo", `kvroute_router_overflow_ratio{`, `kvroute_router_overflow_rate{`, `"kvroute_router_overflow_rate" is exported by no kvroute component`},
		{"undefined variable", `namespace=\"$namespace\"`, `namespace=\"$namespaces\"`, "variable $namespaces is not defined"},
		{"unknown field", `"legendFormat"`, `"legendFromat"`, `unknown field "legendFromat"`},
		{"legend label", `"legendFormat": "{{decision}}"`, `"legendFormat": "{{decisions}}"`, `uses label "decisions"`},
		{"datasource", `"uid": "${datasource}"`, `"uid": "prometheus"`, "does not use the datasource variable"},
		{"label value", `state=\"ready\"`, `state=\"redy\"`, `label state="redy"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(raw), c.old) {
				t.Fatalf("dashboard has no %q to break", c.old)
			}
			bad := strings.Replace(string(raw), c.old, c.new, 1)
			var errs []error
			if d, err := decodeDashboard([]byte(bad)); err != nil {
				errs = append(errs, err)
			} else {
				errs, _ = checkDashboard(d, newPromQL(goldenCatalog(t)))
			}
			if !containsErr(errs, c.want) {
				t.Errorf("errors %v\nwant one containing %q", errs, c.want)
			}
		})
	}
}
