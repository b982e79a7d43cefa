package main

import (
	"errors"
	"testing"
	"time"

	"github.com/kvroute/kvroute/sim"
)

// simConfig parses args (and the environment) like `kvroute sim` and resolves the
// profile, without starting a server.
func simConfig(t *testing.T, args ...string) (sim.Config, error) {
	t.Helper()
	f := &simFlags{cfg: sim.DefaultConfig()}
	cmd := simCommand(f)
	cmd.PersistentFlags().String("config", "", "")
	if err := cmd.ParseFlags(args); err != nil {
		return sim.Config{}, err
	}
	if err := applyConfig(cmd); err != nil {
		return sim.Config{}, err
	}
	return f.config(cmd)
}

func TestSimFlagsProfileAndOverrides(t *testing.T) {
	p, err := sim.LookupProfile("llama-3.1-70b-h100-tp8")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := simConfig(t, "--profile", "llama-3.1-70b-h100-tp8")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NumGPUBlocks != p.NumGPUBlocks || cfg.MaxNumSeqs != 256 || cfg.Cost != p.Cost || cfg.Profile != p.Name {
		t.Fatalf("profile not applied: %+v", cfg)
	}
	if cfg.ListenAddr != ":8000" || cfg.KVEventsEndpoint != "tcp://*:5557" || cfg.KVEventsReplayEndpoint != "tcp://*:5558" {
		t.Fatalf("vLLM's default addresses: %s %s %s", cfg.ListenAddr, cfg.KVEventsEndpoint, cfg.KVEventsReplayEndpoint)
	}
	t.Setenv("KVROUTE_MAX_NUM_SEQS", "7")
	cfg, err = simConfig(t, "--profile", "llama-3.1-70b-h100-tp8", "--num-gpu-blocks", "1000", "--step-base", "5ms",
		"--lora-adapters", "a,b", "--kv-events-format", "array", "--time-scale", "0.05", "--fault-fail-fraction", "0.5")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NumGPUBlocks != 1000 || cfg.Cost.StepBase != 5*time.Millisecond || cfg.MaxNumSeqs != 7 ||
		cfg.Cost.PerPrefillToken != p.Cost.PerPrefillToken || len(cfg.LoRAAdapters) != 2 ||
		cfg.KVEventsFormat != sim.FormatArray || cfg.TimeScale != 0.05 || cfg.Faults.FailFraction != 0.5 {
		t.Fatalf("overrides not applied: %+v", cfg)
	}
}

func TestSimFlagsBad(t *testing.T) {
	for _, args := range [][]string{
		{"--profile", "h200"},
		{"--kv-events-format", "json"},
		{"--num-gpu-blocks", "0"},
		{"--fault-fail-status", "404"},
		{"--kv-events-endpoint", "tcp://127.0.0.1:0"},
	} {
		_, err := simConfig(t, args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}
