package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/internal/fleet"
	"github.com/kvroute/kvroute/sim"
	"github.com/kvroute/kvroute/tokenizer"
)

// demoConfig is everything `kvroute demo` runs with.
type demoConfig struct {
	Engines         int
	ScaleOutAfter   time.Duration
	ScaleOutEngines int
	Listen          string
	GRPCListen      string
	NATSPort        int
	Profile         string
	TimeScale       float64
	NumGPUBlocks    int
	QPS             float64
	Documents       int
	DocTokens       int
	QuestionTokens  int
	MaxTokens       int
	ZipfS           float64
	DocChurn        time.Duration
	Threshold       int
	Prewarm         int
	Seed            uint64
	SummaryEvery    time.Duration
	Duration        time.Duration
}

func defaultDemoConfig() demoConfig {
	return demoConfig{
		Engines: 4, ScaleOutAfter: 60 * time.Second, ScaleOutEngines: 2,
		Listen: ":8080", GRPCListen: "127.0.0.1:9090", NATSPort: -1,
		Profile: "llama-3.1-70b-h100-tp8", TimeScale: 1, QPS: 4,
		Documents: 24, DocTokens: 2000, QuestionTokens: 60, MaxTokens: 24, ZipfS: 1.3, DocChurn: 10 * time.Second,
		Threshold: 8, Seed: 1, SummaryEvery: 5 * time.Second,
	}
}

func newDemoCmd() *cobra.Command {
	c := defaultDemoConfig()
	var logLevel, logFormat string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole system on this machine: NATS, simulated engines, agents, index, router, dashboard, a workload",
		Long: `demo starts, in this process and with no network beyond loopback: an embedded NATS
server, --engines simulated vLLM engines (a real prefix cache, a continuous-batching
scheduler, vLLM's ZMQ KV events) each with its agent, the prefix-block index with its gRPC
API, and the router with its live dashboard. A background workload sends chats that share a
few long system prompts (Zipf popularity) at --qps; after --scale-out-after,
--scale-out-engines more engines join so their warm-up shows on the dashboard. A summary
line is printed every --summary-every. Ctrl-C stops everything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			if err := c.validate(); err != nil {
				return usageError{err}
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if c.Duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.Duration)
				defer cancel()
			}
			return runDemo(ctx, cmd.OutOrStdout(), c, log)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&c.Engines, "engines", c.Engines, "simulated engines at start")
	fs.DurationVar(&c.ScaleOutAfter, "scale-out-after", c.ScaleOutAfter, "when more engines join (0 = never)")
	fs.IntVar(&c.ScaleOutEngines, "scale-out-engines", c.ScaleOutEngines, "engines that join at --scale-out-after")
	fs.StringVar(&c.Listen, "listen", c.Listen, "router HTTP address, HOST:PORT (API, /dashboard/, /metrics, /api/stats)")
	fs.StringVar(&c.GRPCListen, "grpc-listen", c.GRPCListen, "index gRPC address, HOST:PORT (empty = off)")
	fs.IntVar(&c.NATSPort, "nats-port", c.NATSPort, "port of the embedded NATS server on 127.0.0.1 (-1 = any free port)")
	fs.StringVar(&c.Profile, "profile", c.Profile, "engine simulator profile: "+strings.Join(sim.Profiles(), ", "))
	fs.Float64Var(&c.TimeScale, "time-scale", c.TimeScale, "wall seconds per simulated second (1 = real time)")
	fs.IntVar(&c.NumGPUBlocks, "num-gpu-blocks", c.NumGPUBlocks, "KV-cache blocks per engine (0 = the profile's)")
	fs.Float64Var(&c.QPS, "qps", c.QPS, "workload: requests per second (Poisson arrivals; 0 = no workload)")
	fs.IntVar(&c.Documents, "documents", c.Documents, "workload: shared system prompts")
	fs.IntVar(&c.DocTokens, "doc-tokens", c.DocTokens, "workload: tokens per system prompt")
	fs.IntVar(&c.QuestionTokens, "question-tokens", c.QuestionTokens, "workload: tokens per unique question")
	fs.IntVar(&c.MaxTokens, "max-tokens", c.MaxTokens, "workload: output tokens per request")
	fs.Float64Var(&c.ZipfS, "zipf", c.ZipfS, "workload: Zipf exponent of system-prompt popularity (> 1)")
	fs.DurationVar(&c.DocChurn, "doc-churn", c.DocChurn, "workload: every this long a new system prompt becomes the most popular and the least popular retires (0 = a fixed set)")
	fs.IntVar(&c.Threshold, "concurrency-threshold", c.Threshold, "router: in-flight requests per instance before overflow (1..1024)")
	fs.IntVar(&c.Prewarm, "prewarm-prefixes", c.Prewarm, "router: replay this many hottest prefixes to each joining engine before it takes traffic (0 = off, to watch a cold warm-up)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the workload and the engines")
	fs.DurationVar(&c.SummaryEvery, "summary-every", c.SummaryEvery, "period of the summary line")
	fs.DurationVar(&c.Duration, "duration", 0, "stop after this long (0 = until Ctrl-C)")
	fs.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	fs.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

func (c demoConfig) validate() error {
	switch {
	case c.Engines < 1:
		return fmt.Errorf("--engines %d: want ≥ 1", c.Engines)
	case c.ScaleOutEngines < 0 || c.ScaleOutAfter < 0:
		return fmt.Errorf("--scale-out-engines and --scale-out-after must be ≥ 0")
	case c.QPS < 0:
		return fmt.Errorf("--qps %v: want ≥ 0", c.QPS)
	case c.Documents < 1 || c.DocTokens < 1 || c.QuestionTokens < 1 || c.MaxTokens < 1:
		return fmt.Errorf("--documents, --doc-tokens, --question-tokens and --max-tokens must be ≥ 1")
	case c.ZipfS <= 1:
		return fmt.Errorf("--zipf %v: want > 1", c.ZipfS)
	case c.DocChurn < 0:
		return fmt.Errorf("--doc-churn %v: want ≥ 0", c.DocChurn)
	case c.Threshold < 1 || c.Threshold > 1024:
		return fmt.Errorf("--concurrency-threshold %d: want 1..1024", c.Threshold)
	case c.SummaryEvery <= 0:
		return fmt.Errorf("--summary-every must be positive")
	}
	return nil
}

// demo is a running demo: the fleet plus its workload.
type demo struct {
	fleet *fleet.Fleet
	load  *demoLoad
}

// startDemo brings the fleet up; the workload, scale-out and summary run until ctx ends.
func startDemo(ctx context.Context, c demoConfig, log *slog.Logger) (*demo, error) {
	tok, err := tokenizer.Default()
	if err != nil {
		return nil, err
	}
	fc := fleet.DefaultConfig()
	fc.Engines, fc.Profile, fc.TimeScale, fc.NumGPUBlocks = c.Engines, c.Profile, c.TimeScale, c.NumGPUBlocks
	fc.Seed, fc.ListenAddr, fc.GRPCListenAddr, fc.NATSPort = int64(c.Seed), c.Listen, c.GRPCListen, c.NATSPort
	fc.Router.ConcurrencyThreshold = c.Threshold
	fc.Router.RouterID = "demo"
	fc.Router.DebugHeaders = true
	fc.Router.PrewarmPrefixes = c.Prewarm
	f, err := fleet.Start(ctx, fc, tok, nil, log)
	if err != nil {
		return nil, err
	}
	d := &demo{fleet: f}
	if c.QPS > 0 {
		d.load, err = newDemoLoad(c, tok, f.URL())
		if err != nil {
			f.Close()
			return nil, err
		}
		go d.load.run(ctx)
	}
	return d, nil
}

func runDemo(ctx context.Context, out io.Writer, c demoConfig, log *slog.Logger) error {
	start := time.Now()
	d, err := startDemo(ctx, c, log)
	if err != nil {
		return err
	}
	defer d.fleet.Close()
	url := d.fleet.URL()
	fmt.Fprintf(out, "kvroute demo ready in %.1f s: %d simulated engines (%s profile), agents, index and router on one embedded NATS server.\n\n",
		time.Since(start).Seconds(), c.Engines, c.Profile)
	fmt.Fprintf(out, "  router     %s/v1   (OpenAI API)\n", url)
	fmt.Fprintf(out, "  dashboard  %s/dashboard/\n", url)
	fmt.Fprintf(out, "  metrics    %s/metrics\n", url)
	fmt.Fprintf(out, "  stats      %s/api/stats\n", url)
	if g := d.fleet.GRPCAddr(); g != "" {
		fmt.Fprintf(out, "  gRPC       %s   (kvroute index instances --addr %s)\n", g, g)
	}
	fmt.Fprintf(out, "  NATS       %s\n\n", d.fleet.NATSURL())
	fmt.Fprintf(out, "Try:\n  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' \\\n    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}'\n\n",
		url, sim.DefaultModel)
	if c.QPS > 0 {
		fmt.Fprintf(out, "Workload: %.1f req/s of chats over %d shared system prompts of ~%d tokens (Zipf %.2f", c.QPS, c.Documents, c.DocTokens, c.ZipfS)
		if c.DocChurn > 0 {
			fmt.Fprintf(out, "; a new one every %v", c.DocChurn)
		}
		fmt.Fprintln(out, ").")
	}
	var scale <-chan time.Time
	if c.ScaleOutAfter > 0 && c.ScaleOutEngines > 0 {
		fmt.Fprintf(out, "Scale-out: %d more engines join after %v.\n", c.ScaleOutEngines, c.ScaleOutAfter)
		t := time.NewTimer(c.ScaleOutAfter)
		defer t.Stop()
		scale = t.C
	}
	fmt.Fprintln(out, "Ctrl-C stops everything.")
	tick := time.NewTicker(c.SummaryEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "\nstopping…")
			return nil
		case <-scale:
			fmt.Fprintf(out, "%s  scale-out: %d engines joining…\n", time.Now().Format("15:04:05"), c.ScaleOutEngines)
			go func() {
				if err := d.fleet.AddEngines(ctx, c.ScaleOutEngines); err != nil && ctx.Err() == nil {
					fmt.Fprintf(out, "scale-out failed: %v\n", err)
				}
			}()
		case <-tick.C:
			fmt.Fprintln(out, summaryLine(d))
		}
	}
}

// summaryLine is one line of fleet figures: the router's own over its last 60 s.
func summaryLine(d *demo) string {
	st := d.fleet.Router().Stats()
	healthy := 0
	for _, in := range st.Instances {
		if in.Healthy {
			healthy++
		}
	}
	line := fmt.Sprintf("%s  %5.1f req/s  hit rate %5.1f%%  overflow %4.1f%%  TTFT p50 %s p90 %s  instances %d/%d",
		st.Time.Format("15:04:05"), st.Fleet.RequestsPerSecond, 100*st.Fleet.HitRate, 100*st.Fleet.OverflowRatio,
		fmtDur(st.Fleet.TTFTP50Seconds), fmtDur(st.Fleet.TTFTP90Seconds), healthy, len(st.Instances))
	if d.load != nil {
		if n := d.load.errors.Load(); n > 0 {
			line += fmt.Sprintf("  client errors %d", n)
		}
	}
	return line
}

func fmtDur(s float64) string {
	if s <= 0 {
		return "–"
	}
	if s < 1 {
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return fmt.Sprintf("%.2fs", s)
}

// demoLoad is the demo's background workload: Poisson arrivals of streaming chats, each a
// shared system prompt (Zipf popularity) and a unique question. The prompts form a sliding
// window: every DocChurn a new prompt becomes the most popular and the least popular
// retires, as documents and conversations come and go in a real fleet, so instances that
// join later still see prompts nobody has cached.
type demoLoad struct {
	c     demoConfig
	url   string
	model string
	text  *bench.Text
	hc    *http.Client
	start time.Time

	mu   sync.Mutex
	docs map[int]string // by document number; only the live window is kept

	// errors counts failed requests and arrivals dropped because the fleet fell far behind.
	errors atomic.Int64
}

func newDemoLoad(c demoConfig, tok *tokenizer.Model, url string) (*demoLoad, error) {
	text := bench.NewText()
	if err := text.Calibrate(func(s string) (int, error) {
		ids, err := tok.Encode(s, false)
		return len(ids), err
	}); err != nil {
		return nil, err
	}
	return &demoLoad{c: c, url: url, model: tok.Name(), text: text, docs: map[int]string{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}, nil
}

// doc returns the system prompt of the document of popularity rank (0 = most popular) at
// time now. Document n's text depends only on the seed and n.
func (l *demoLoad) doc(rank int, now time.Time) string {
	newest := l.c.Documents - 1
	if l.c.DocChurn > 0 {
		newest += int(now.Sub(l.start) / l.c.DocChurn)
	}
	n := newest - rank
	l.mu.Lock()
	defer l.mu.Unlock()
	if d, ok := l.docs[n]; ok {
		return d
	}
	r := rand.New(rand.NewPCG(l.c.Seed, uint64(n)))
	d := fmt.Sprintf("You are assistant #%d. Answer using only this reference.\n\n%s", n, l.text.ForTokens(r, l.c.DocTokens))
	l.docs[n] = d
	delete(l.docs, newest-l.c.Documents-8) // retired long ago
	return d
}

func (l *demoLoad) run(ctx context.Context) {
	r := rand.New(rand.NewPCG(l.c.Seed, 0x6c6f6164))
	zipf := rand.NewZipf(r, l.c.ZipfS, 1, uint64(l.c.Documents-1))
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	defer wg.Wait()
	l.start = time.Now()
	next := l.start
	for {
		next = next.Add(time.Duration(r.ExpFloat64() / l.c.QPS * float64(time.Second)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		doc := l.doc(int(zipf.Uint64()), next)
		question := l.text.ForTokens(r, l.c.QuestionTokens)
		body, _ := json.Marshal(map[string]any{
			"model": l.model, "stream": true, "max_tokens": l.c.MaxTokens,
			"messages": []map[string]string{{"role": "system", "content": doc}, {"role": "user", "content": question + "?"}},
		})
		select {
		case sem <- struct{}{}:
		default: // the fleet is far behind: drop this arrival rather than pile up
			l.errors.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := l.send(ctx, body); err != nil && ctx.Err() == nil {
				l.errors.Add(1)
			}
		}()
	}
}

// send posts one streaming chat and reads the stream to its end.
func (l *demoLoad) send(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("demo: %s: %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("data: [DONE]")) {
			done = true
		}
		if bytes.HasPrefix(line, []byte("event: error")) {
			return fmt.Errorf("demo: stream error")
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !done {
		return fmt.Errorf("demo: stream ended without [DONE]")
	}
	return nil
}
