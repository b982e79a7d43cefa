package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvroute/kvroute/internal/natsutil"
)

// TestAgentCommandServesMetrics runs `kvroute agent` in-process against a real ZMQ PUB,
// an HTTP engine stand-in and an in-process NATS server, and reads its --metrics-listen
// endpoints: /healthz, and /metrics showing a received batch and the engine scrape.
func TestAgentCommandServesMetrics(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","parent":null}]}`)
		case "/metrics":
			fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer engine.Close()
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()

	root := newRootCmd()
	root.SetArgs([]string{"agent", "--engine-url", engine.URL, "--zmq-endpoint", "tcp://" + pub.Addr().String(),
		"--nats", srv.ClientURL(), "--metrics-listen", metricsAddr, "--heartbeat-interval", "100ms", "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			select {
			case err := <-done:
				t.Fatalf("agent command exited: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	poll("/healthz", func() bool { code, body := get("/healthz"); return code == 200 && body == "ok\n" })
	poll("the agent's subscription", func() bool { return len(pub.(zmq4.Topics).Topics()) > 0 })

	tokens := make([]uint32, 16)
	for i := range tokens {
		tokens[i] = uint32(100 + i)
	}
	payload, err := msgpack.Marshal([]any{1.7e9, []any{[]any{"BlockStored", []uint64{7}, nil, tokens, 16, nil, "GPU", nil, nil}}, 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), binary.BigEndian.AppendUint64(nil, 0), payload)); err != nil {
		t.Fatal(err)
	}
	var body string
	poll("/metrics with the batch and the engine scrape", func() bool {
		var code int
		code, body = get("/metrics")
		return code == 200 && strings.Contains(body, "kvroute_agent_batches_received_total 1\n") &&
			strings.Contains(body, "kvroute_agent_keys_held 1\n") && strings.Contains(body, "kvroute_agent_engine_up 1\n")
	})
	for _, name := range []string{"kvroute_agent_batches_published_total", "kvroute_agent_decode_errors_total",
		"kvroute_agent_publish_duration_seconds_bucket", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent command: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent command did not stop with its context")
	}
}
