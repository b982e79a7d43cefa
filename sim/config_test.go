package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/go-zeromq/zmq4"
)

func TestConfigValidate(t *testing.T) {
	if cfg := testConfig(); cfg.Validate() != nil {
		err := cfg.Validate()
		t.Fatalf("test config: %v", err)
	}
	for _, name := range Profiles() {
		cfg := DefaultConfig()
		p, err := LookupProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		p.Apply(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("profile %s: %v", name, err)
		}
	}
	bad := map[string]func(*Config){
		"block size":       func(c *Config) { c.BlockSize = 0 },
		"blocks":           func(c *Config) { c.NumGPUBlocks = -1 },
		"time scale":       func(c *Config) { c.TimeScale = -1 },
		"format":           func(c *Config) { c.KVEventsFormat = "json" },
		"endpoint":         func(c *Config) { c.KVEventsEndpoint = "127.0.0.1:5557" },
		"connect port 0":   func(c *Config) { c.KVEventsEndpoint = "tcp://127.0.0.1:0" },
		"transport":        func(c *Config) { c.KVEventsReplayEndpoint = "udp://x:1" },
		"adapter repeats":  func(c *Config) { c.LoRAAdapters = []string{c.Model} },
		"empty adapter":    func(c *Config) { c.LoRAAdapters = []string{" "} },
		"fault fraction":   func(c *Config) { c.Faults.FailFraction = 2 },
		"fault status":     func(c *Config) { c.Faults.FailStatus = 418 },
		"no model":         func(c *Config) { c.Model = "" },
		"negative cost":    func(c *Config) { c.Cost.PerPrefillToken = -1 },
		"max tokens":       func(c *Config) { c.DefaultMaxTokens = 0 },
		"request bytes":    func(c *Config) { c.MaxRequestBytes = 0 },
		"batched tokens":   func(c *Config) { c.MaxNumBatchedTokens = 0 },
		"max num seqs":     func(c *Config) { c.MaxNumSeqs = 0 },
		"listen":           func(c *Config) { c.ListenAddr = "" },
		"dp rank":          func(c *Config) { c.DataParallelRank = -1 },
		"buffer steps":     func(c *Config) { c.KVEventsBufferSteps = -1 },
		"unknown profile?": nil,
	}
	for name, mutate := range bad {
		if mutate == nil {
			if _, err := LookupProfile("h200"); !errors.Is(err, ErrConfig) {
				t.Errorf("unknown profile: %v", err)
			}
			continue
		}
		cfg := testConfig()
		mutate(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want ErrConfig", name, err)
		}
		if _, err := New(cfg, nil, nil, nil); err == nil {
			t.Errorf("%s: New accepted a bad config", name)
		}
	}
}

// The 70B profile's capacity follows the memory arithmetic: 320 KiB per token.
func TestLlama70BMemoryArithmetic(t *testing.T) {
	p, _ := LookupProfile("llama-3.1-70b-h100-tp8")
	m := p.Memory
	if m.KVBytesPerToken() != 320*1024 {
		t.Fatalf("KV bytes per token %d, want 327680", m.KVBytesPerToken())
	}
	if p.NumGPUBlocks != m.NumBlocks(16) || p.NumGPUBlocks < 50000 || p.NumGPUBlocks > 100000 {
		t.Fatalf("blocks %d (memory model says %d)", p.NumGPUBlocks, m.NumBlocks(16))
	}
	t.Logf("KV cache %.1f GB = %d tokens = %d blocks of 16", float64(m.KVCacheBytes())/1e9, p.NumGPUBlocks*16, p.NumGPUBlocks)
}

// Without '*' the sim connects to the endpoint, as vLLM does: a subscriber that binds
// receives the events.
func TestEventsConnectMode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen("tcp://" + addr); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.KVEventsEndpoint = "tcp://" + addr
	s := startServer(t, cfg)
	if s.EventsEndpoint() != cfg.KVEventsEndpoint {
		t.Fatalf("EventsEndpoint %q", s.EventsEndpoint())
	}
	got := make(chan zmq4.Msg, 64)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			got <- m
		}
	}()
	// Once connected, every later batch arrives, in order.
	var seqs []uint64
	i := 0
	eventually(t, "ten batches over the dialed connection", func() bool {
		i++
		generate(t, s, seqTokens(1000*i, 16), "", "", 1)
		for {
			select {
			case m := <-got:
				if len(m.Frames) != 3 || !strings.Contains(string(m.Frames[2]), evStored) {
					t.Fatalf("frames %q", m.Frames)
				}
				seq := binary.BigEndian.Uint64(m.Frames[1])
				if len(seqs) > 0 && seq != seqs[len(seqs)-1]+1 {
					t.Fatalf("seq %d after %d", seq, seqs[len(seqs)-1])
				}
				seqs = append(seqs, seq)
			default:
				return len(seqs) >= 10
			}
		}
	})
}
