package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// palette colours series in a fixed order per policy, so a policy keeps its colour in every chart.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

func policyColor(p string) string {
	for i, name := range Policies {
		if name == p {
			return palette[i]
		}
	}
	return palette[len(palette)-1]
}

// series is one line of a chart.
type series struct {
	Name   string
	Color  string
	Width  float64
	Points [][2]float64
}

// chart is an SVG line chart with linear axes.
type chart struct {
	Title, XLabel, YLabel string
	YMin, YMax            float64 // both 0: from the data
	Series                []series
}

// niceStep returns a round tick step for a span divided into about n ticks.
func niceStep(span float64, n int) float64 {
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// svg renders the chart as an inline <svg> element.
func (c chart) svg() string {
	const w, h, left, right, top, bottom = 560.0, 300.0, 60.0, 150.0, 28.0, 42.0
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			if math.IsNaN(p[0]) || math.IsNaN(p[1]) || math.IsInf(p[0], 0) || math.IsInf(p[1], 0) {
				continue
			}
			xmin, xmax = math.Min(xmin, p[0]), math.Max(xmax, p[0])
			ymin, ymax = math.Min(ymin, p[1]), math.Max(ymax, p[1])
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="11">`, w, h, w, h)
	fmt.Fprintf(&b, `<text x="%g" y="16" font-size="13" font-weight="bold">%s</text>`, left, html.EscapeString(c.Title))
	if math.IsInf(xmin, 1) {
		fmt.Fprintf(&b, `<text x="%g" y="%g">no data</text></svg>`, left, h/2)
		return b.String()
	}
	if c.YMin != 0 || c.YMax != 0 {
		ymin, ymax = c.YMin, c.YMax
	} else {
		ymin = math.Min(ymin, 0)
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	pw, ph := w-left-right, h-top-bottom
	px := func(x float64) float64 { return left + (x-xmin)/(xmax-xmin)*pw }
	py := func(y float64) float64 { return top + ph - (y-ymin)/(ymax-ymin)*ph }
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#999"/>`, left, top, pw, ph)
	xs := niceStep(xmax-xmin, 6)
	for x := math.Ceil(xmin/xs) * xs; x <= xmax+xs*1e-9; x += xs {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/><text x="%.1f" y="%g" text-anchor="middle">%s</text>`,
			px(x), top, px(x), top+ph, px(x), top+ph+14, tick(x, xs))
	}
	ys := niceStep(ymax-ymin, 5)
	for y := math.Ceil(ymin/ys) * ys; y <= ymax+ys*1e-9; y += ys {
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#eee"/><text x="%g" y="%.1f" text-anchor="end">%s</text>`,
			left, py(y), left+pw, py(y), left-4, py(y)+4, tick(y, ys))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`, left+pw/2, h-8, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text x="14" y="%g" text-anchor="middle" transform="rotate(-90 14 %g)">%s</text>`, top+ph/2, top+ph/2, html.EscapeString(c.YLabel))
	for i, s := range c.Series {
		var pts []string
		for _, p := range s.Points {
			if math.IsNaN(p[0]) || math.IsNaN(p[1]) || math.IsInf(p[0], 0) || math.IsInf(p[1], 0) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(math.Max(ymin, math.Min(ymax, p[1])))))
		}
		width := s.Width
		if width == 0 {
			width = 1.6
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%g" points="%s"/>`, s.Color, width, strings.Join(pts, " "))
		}
		ly := top + 10 + float64(i)*16
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="%g"/><text x="%g" y="%g">%s</text>`,
			left+pw+10, ly, left+pw+28, ly, s.Color, width, left+pw+32, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func tick(v, step float64) string {
	if math.Abs(v) < step*1e-9 {
		v = 0
	}
	if step >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	d := int(math.Ceil(-math.Log10(step)))
	return fmt.Sprintf("%.*f", d, v)
}

// WriteHTML writes one self-contained HTML page (inline SVG, no external assets) with,
// per workload: the TTFT CDF per policy, the fleet hit rate over time per policy, and
// each policy's per-instance warm-up curves.
func (r *Report) WriteHTML(w io.Writer) error {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>kvroute bench</title>\n")
	b.WriteString("<style>body{font-family:sans-serif;margin:24px;color:#222}h2{margin-top:36px}.row{display:flex;flex-wrap:wrap;gap:12px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th:first-child,td:first-child{text-align:left}</style>\n")
	fmt.Fprintf(&b, "</head><body><h1>kvroute bench</h1><p>%s · %s · profile %s · time scale %g · seed %d. TTFT, time axes and warm-up are simulated time; routing overhead is real time.</p>\n",
		html.EscapeString(r.Date), html.EscapeString(r.Machine), html.EscapeString(r.Profile), r.TimeScale, r.Seed)
	for i := range r.Workloads {
		wl := &r.Workloads[i]
		fmt.Fprintf(&b, "<h2>%s</h2><p>%d requests, %d engines, %s, oracle hit rate %s.</p>\n",
			html.EscapeString(wl.Name), wl.Requests, wl.Engines, html.EscapeString(wl.Mode), fmtF(wl.OracleHitRate, "%.3f"))
		b.WriteString("<table><tr><th>policy</th><th>TTFT p50 s</th><th>p90 s</th><th>p99 s</th><th>hit rate</th><th>of oracle</th><th>req/s</th><th>overflow</th><th>routing p99 ms</th><th>warm-up s</th></tr>\n")
		for _, p := range wl.Policies {
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
				html.EscapeString(p.Policy), fmtF(p.TTFTP50S, "%.3f"), fmtF(p.TTFTP90S, "%.3f"), fmtF(p.TTFTP99S, "%.3f"),
				fmtF(p.HitRate, "%.3f"), fmtF(p.OracleFraction, "%.2f"), fmtF(p.ThroughputRPS, "%.3f"), fmtF(p.OverflowRatio, "%.3f"),
				fmtF(p.RoutingOverheadP99S*1000, "%.3f"), fmtF(p.WarmupS, "%.1f"))
		}
		b.WriteString("</table>\n<div class=\"row\">")
		cdf := chart{Title: "TTFT CDF", XLabel: "TTFT (simulated s)", YLabel: "fraction of requests", YMin: 0, YMax: 1}
		hr := chart{Title: "Fleet hit rate over time", XLabel: "time (simulated s)", YLabel: "hit rate (tokens)", YMin: 0, YMax: 1}
		for _, p := range wl.Policies {
			s := series{Name: p.Policy, Color: policyColor(p.Policy)}
			for _, pt := range p.TTFTCDF {
				s.Points = append(s.Points, [2]float64{pt.X, pt.F})
			}
			cdf.Series = append(cdf.Series, s)
			h := series{Name: p.Policy, Color: policyColor(p.Policy)}
			for _, pt := range p.HitRateOverTime {
				h.Points = append(h.Points, [2]float64{pt.T, float64(pt.V)})
			}
			hr.Series = append(hr.Series, h)
		}
		b.WriteString(cdf.svg())
		b.WriteString(hr.svg())
		b.WriteString("</div>\n<div class=\"row\">")
		for _, p := range wl.Policies {
			wc := chart{Title: "Warm-up: " + p.Policy, XLabel: "time (simulated s)", YLabel: "instance hit rate", YMin: 0, YMax: 1}
			fleet := series{Name: "fleet", Color: "#000", Width: 3}
			for _, pt := range p.HitRateOverTime {
				fleet.Points = append(fleet.Points, [2]float64{pt.T, float64(pt.V)})
			}
			wc.Series = append(wc.Series, fleet)
			for j, in := range p.Instances {
				s := series{Name: in.Instance, Color: palette[j%len(palette)], Width: 1.2}
				if in.JoinedS > 0 {
					s.Width = 2.2
					s.Name += " (joined)"
				}
				for _, pt := range in.Curve {
					s.Points = append(s.Points, [2]float64{pt.T, float64(pt.V)})
				}
				wc.Series = append(wc.Series, s)
			}
			b.WriteString(wc.svg())
		}
		b.WriteString("</div>\n")
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
