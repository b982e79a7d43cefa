package main

import (
	"bytes"
	"context"
	"flag"
	"image/png"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kvroute/kvroute/tokenizer"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the dashboard screenshot to docs/img/dashboard.png")

// testDemoConfig is a small, fast demo: real engines, agents, index and router.
func testDemoConfig() demoConfig {
	c := defaultDemoConfig()
	c.Listen, c.GRPCListen = "127.0.0.1:0", "127.0.0.1:0"
	c.Engines, c.ScaleOutAfter = 3, 0
	c.TimeScale, c.QPS = 0.2, 12
	c.Documents, c.DocTokens, c.QuestionTokens, c.MaxTokens = 6, 600, 30, 8
	return c
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func TestDemoServesRoutedRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d, err := startDemo(ctx, testDemoConfig(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.fleet.Close()
	// The workload must get routed by cache hits once the shared prompts are cached.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := d.fleet.Router().Stats()
		var hits uint64
		for _, in := range st.Instances {
			hits += in.Decisions["cache_hit"]
		}
		if hits >= 5 && st.Fleet.HitRate > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cache-hit routing after 60 s: %+v (client errors %d)", st.Fleet, d.load.errors.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if line := summaryLine(d); !strings.Contains(line, "req/s") || !strings.Contains(line, "hit rate") {
		t.Fatalf("summary line: %q", line)
	}
	if n := d.load.errors.Load(); n > 0 {
		t.Fatalf("%d client errors in the demo workload", n)
	}
}

// TestDashboardInBrowser loads the live dashboard in headless Chromium while the demo runs
// and checks that the charts and the table show live data, then saves a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	chrome := findChromium()
	if chrome == "" {
		t.Skip("no chromium on PATH: `make test` installs Debian's chromium when it can (scripts/ensure-chromium.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := testDemoConfig()
	d, err := startDemo(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.fleet.Close()
	// Scale out while the page is open so a newcomer appears on it.
	go func() {
		time.Sleep(3 * time.Second)
		_ = d.fleet.AddEngines(ctx, 1)
	}()

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1500, 1100),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	err = chromedp.Do(bctx, chromedp.Navigate(d.fleet.URL()+"/dashboard/"))
	if err != nil {
		t.Fatal(err)
	}
	// Live data: several polls rendered, hit-rate and cached-block curves drawn, every
	// instance including the newcomer in the table, and the request-rate tile filled.
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`Number(document.body.dataset.updates || 0) >= 6 &&
		Number(document.getElementById("c-hit").dataset.points || 0) > 0 &&
		Number(document.getElementById("c-blocks").dataset.points || 0) > 0 &&
		document.querySelectorAll("#instances tbody tr").length >= 4 &&
		document.getElementById("t-rps").textContent !== "–"`, chromedp.WithPollingTimeout(90*time.Second)))
	if err != nil {
		t.Fatalf("dashboard never showed live data: %v", err)
	}
	eval := func(expr string) int {
		v, err := chromedp.Run(bctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	rows := eval(`document.querySelectorAll("#instances tbody tr").length`)
	hitPoints := eval(`Number(document.getElementById("c-hit").dataset.points)`)
	blockPoints := eval(`Number(document.getElementById("c-blocks").dataset.points)`)
	updates := eval(`Number(document.body.dataset.updates)`)
	rps, err := chromedp.Run(bctx, chromedp.Text(`#t-rps`))
	if err != nil {
		t.Fatal(err)
	}
	if rows < 4 || hitPoints == 0 || blockPoints == 0 || updates < 6 || rps == "–" {
		t.Fatalf("rows %d hit points %d block points %d updates %d rps %q", rows, hitPoints, blockPoints, updates, rps)
	}
	if err := chromedp.Do(bctx, chromedp.Sleep(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 600 {
		t.Fatalf("screenshot %v too small", b)
	}
	out := filepath.Join(t.TempDir(), "dashboard.png")
	if *updateScreenshot {
		out = filepath.Join("..", "..", "docs", "img", "dashboard.png")
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d rows, %d hit-rate points)", out, rows, hitPoints)
}

func TestDemoDocumentsChurn(t *testing.T) {
	c := testDemoConfig()
	c.Documents, c.DocTokens, c.DocChurn = 4, 20, 10*time.Second
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	l, err := newDemoLoad(c, tok, "http://unused")
	if err != nil {
		t.Fatal(err)
	}
	l.start = time.Unix(1000, 0)
	t0 := l.start
	top := l.doc(0, t0)
	if l.doc(0, t0) != top {
		t.Fatal("the same rank at the same time must give the same prompt")
	}
	later := t0.Add(10 * time.Second)
	if l.doc(0, later) == top {
		t.Fatal("after one churn interval a new prompt must be the most popular")
	}
	if l.doc(1, later) != top {
		t.Fatal("the previous favourite must move down one rank")
	}
	for rank := range 4 {
		for _, other := range []int{rank + 1, rank + 2} {
			if other < 4 && l.doc(rank, t0) == l.doc(other, t0) {
				t.Fatalf("ranks %d and %d share a prompt", rank, other)
			}
		}
	}
	c.DocChurn = 0
	fixed, _ := newDemoLoad(c, tok, "http://unused")
	fixed.start = t0
	if fixed.doc(0, t0.Add(time.Hour)) != fixed.doc(0, t0) {
		t.Fatal("without churn the set is fixed")
	}
}
