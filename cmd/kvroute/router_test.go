package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/internal/natsutil"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRouterCommandServesDashboardAndIndexAPI runs `kvroute router` in-process (NATS
// discovery, in-process index) and checks everything it serves: the probes, the OpenAI
// API's model list, /api/stats, the dashboard page with its /api/history, /metrics, and
// the index's gRPC API on --grpc-listen.
func TestRouterCommandServesDashboardAndIndexAPI(t *testing.T) {
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	root.SetArgs([]string{"router", "--listen", httpAddr, "--grpc-listen", grpcAddr, "--nats", srv.ClientURL(),
		"--tokenizer", "none", "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	base := "http://" + httpAddr
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := get("/healthz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("router never answered /healthz")
		}
		time.Sleep(50 * time.Millisecond)
	}
	checks := []struct {
		path, want string
		code       int
	}{
		{"/readyz", "no healthy instance", 503},
		{"/v1/models", `"data"`, 200},
		{"/api/stats", `"fleet"`, 200},
		{"/dashboard/", `<script src="app.js">`, 200},
		{"/dashboard/app.js", "api/history", 200},
		{"/metrics", "kvroute_router_", 200},
	}
	for _, c := range checks {
		code, body := get(c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %.120q, want %d containing %q", c.path, code, body, c.code, c.want)
		}
	}
	// The dashboard samples every second: its history fills.
	for {
		_, body := get("/api/history")
		var h struct {
			History []json.RawMessage `json:"history"`
		}
		if json.Unmarshal([]byte(body), &h) == nil && len(h.History) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/history never filled: %.200s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	st, err := kvroutev1.NewIndexClient(conn).Stats(rctx, &kvroutev1.StatsRequest{})
	if err != nil {
		t.Fatalf("index gRPC Stats on --grpc-listen: %v", err)
	}
	if st.GetInstances() != 0 {
		t.Fatalf("stats %v: want an empty fleet", st)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("router command: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("router command did not stop when its context ended")
	}
}
