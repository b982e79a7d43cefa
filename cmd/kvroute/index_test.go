package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/kvroute/kvroute/indexer"
	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// TestIndexCommands runs `kvroute index instances|lookup|stats` against a real index
// (in-process NATS, Service, gRPC server) fed by one agent-shaped publisher.
func TestIndexCommands(t *testing.T) {
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := indexer.New(indexer.DefaultConfig(), nc, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ep, err := indexer.NewGRPCServer(svc, nil, nil).Serve(indexer.GRPCConfig{ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()

	ids := make([]uint32, 40)
	for i := range ids {
		ids[i] = uint32(7 + i)
	}
	keys := kvblock.Keys(nil, kvblock.Seed("m", "", ""), ids, 16)
	hb, _ := proto.Marshal(&kvroutev1.Heartbeat{Descriptor_: &kvroutev1.InstanceDescriptor{Id: "eng-1", Model: "m",
		EngineUrl: "http://eng-1:8000", BlockSize: 16}, Epoch: 5, LastSeq: 1})
	b, _ := proto.Marshal(&kvroutev1.EventBatch{Instance: "eng-1", Epoch: 5, Seq: 1, Cleared: true,
		Stored: []*kvroutev1.Stored{{Keys: keys}}})
	if err := nc.Publish(kvroutev1.SubjectEvents+"eng-1", b); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(kvroutev1.SubjectHeartbeat+"eng-1", hb); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if in, ok := svc.Instance("eng-1"); ok && in.State == indexer.StateReady && in.Blocks == 2 && in.Descriptor != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("instance never ready")
		}
		time.Sleep(5 * time.Millisecond)
	}

	run := func(args ...string) string {
		t.Helper()
		cmd := newIndexCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("index %v: %v (%s)", args, err, out.String())
		}
		return out.String()
	}
	out := run("instances", "--addr", ep.Addr())
	if !strings.Contains(out, "eng-1") || !strings.Contains(out, "ready") || !strings.Contains(out, "http://eng-1:8000") {
		t.Fatalf("instances table:\n%s", out)
	}
	body := filepath.Join(t.TempDir(), "req.json")
	ints, _ := json.Marshal(ids)
	if err := os.WriteFile(body, fmt.Appendf(nil, `{"model":"m","prompt":%s}`, ints), 0o600); err != nil {
		t.Fatal(err)
	}
	out = run("lookup", "--addr", ep.Addr(), "--body", body)
	if !strings.Contains(out, "40 tokens, 2 full blocks") || !strings.Contains(out, "eng-1") || !strings.Contains(out, "80.0%") {
		t.Fatalf("lookup table:\n%s", out)
	}
	var resp struct {
		Matches []struct {
			Instance      string `json:"instance"`
			MatchedBlocks int    `json:"matchedBlocks"`
		} `json:"matches"`
	}
	if err := json.Unmarshal([]byte(run("lookup", "--addr", ep.Addr(), "--body", body, "--json")), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Matches) != 1 || resp.Matches[0].MatchedBlocks != 2 {
		t.Fatalf("lookup --json = %+v", resp)
	}
	if out := run("stats", "--addr", ep.Addr()); !strings.Contains(out, "keys") {
		t.Fatalf("stats:\n%s", out)
	}
	// A missing body file is a usage error that names the flag.
	cmd := newIndexCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"lookup", "--addr", ep.Addr(), "--body", filepath.Join(t.TempDir(), "none.json")})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--body") {
		t.Fatalf("missing body: err = %v", err)
	}
}
