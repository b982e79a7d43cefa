package sim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestFaultDropAndStopEventsLeaveSeqGapsReplayFills(t *testing.T) {
	s := startServer(t, testConfig())
	sub := subscribe(t, s.EventsEndpoint())
	waitSubscribed(t, s, sub)
	if err := s.SetFaults(Faults{DropEventsFraction: 1}); err != nil {
		t.Fatal(err)
	}
	generate(t, s, seqTokens(1, 32), "", "", 1)
	if err := s.SetFaults(Faults{StopEvents: true}); err != nil {
		t.Fatal(err)
	}
	generate(t, s, seqTokens(100, 32), "", "", 1)
	if err := s.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	generate(t, s, seqTokens(200, 32), "", "", 1)
	lastSeq := s.pub.nextSeq() - 1
	eventually(t, "the batch after the faults", func() bool {
		msgs := sub.all()
		return msgs[len(msgs)-1].seq == lastSeq
	})
	msgs := sub.all()
	last, prev := msgs[len(msgs)-1], msgs[len(msgs)-2]
	if last.seq != prev.seq+3 {
		t.Fatalf("seq %d after %d: want a gap of the 2 withheld batches", last.seq, prev.seq)
	}
	if got := counterValue(t, s.m.set().batchesDropped); got != 2 {
		t.Fatalf("dropped batches metric %v, want 2", got)
	}
	// The withheld batches are in the replay buffer.
	if kept := s.pub.since(prev.seq + 1); len(kept) != 3 || kept[0].seq != prev.seq+1 {
		t.Fatalf("replay buffer holds %d batches from %d", len(kept), kept[0].seq)
	}
}

func TestFaultRestart(t *testing.T) {
	cfg := testConfig()
	cfg.HashSeed = "" // like vLLM without PYTHONHASHSEED: hashes change across restarts
	cfg.TimeScale = 1
	s := startServer(t, cfg)
	sub := subscribe(t, s.EventsEndpoint())
	waitSubscribed(t, s, sub)
	prompt := seqTokens(1, 32)
	generate(t, s, prompt, "", "", 1)
	eventually(t, "the batch", func() bool { return len(sub.all()) >= 2 })
	firstHash := storedHashes(t, sub.all()[len(sub.all())-1].payload)[0]

	// A request in flight when the engine restarts fails with 503.
	r, err := s.submit(seqTokens(500, 32), "", "", 1000) // 2 s at time scale 1
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the request to run", func() bool { running, _, _ := s.Load(); return running == 1 })
	resp, b := post(t, s.URL()+"/admin/faults", `{"restart":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("restart: %d %s", resp.StatusCode, b)
	}
	eventually(t, "the in-flight request to fail", func() bool { return r.snapshot().done })
	if err := r.snapshot().err; !errors.Is(err, ErrRestarted) {
		t.Fatalf("in-flight request error %v", err)
	}
	if len(s.KVBlockKeys()) != 0 {
		t.Fatal("cache survived the restart")
	}
	// Like a new process, the counters start from zero.
	if q := counterValue(t, s.m.set().prefixQueries); q != 0 {
		t.Fatalf("prefix_cache_queries after restart %v, want 0", q)
	}

	n := len(sub.all())
	generate(t, s, prompt, "", "", 1)
	eventually(t, "a batch after the restart", func() bool { return len(sub.all()) > n })
	msgs := sub.all()
	after := msgs[n]
	if after.seq != 0 {
		t.Fatalf("first seq after restart %d, want 0", after.seq)
	}
	for _, f := range msgs[:n] {
		if strings.Contains(string(f.payload), evCleared) {
			t.Fatal("a restart must not send AllBlocksCleared")
		}
	}
	if h := storedHashes(t, after.payload)[0]; h == firstHash {
		t.Fatalf("block hash %x unchanged across a restart without a hash seed", h)
	}
	if g := generate(t, s, prompt, "", "", 1); g.CachedTokens != 16 {
		t.Fatalf("cache after restart: cached %d, want 16", g.CachedTokens)
	}
}

// storedHashes decodes the block hashes of a batch's first BlockStored (map form).
func storedHashes(t *testing.T, payload []byte) []uint64 {
	t.Helper()
	batch := decodeAny(t, payload).([]any)
	for _, ev := range batch[1].([]any) {
		m := ev.(map[string]any)
		if m["type"] == evStored {
			var out []uint64
			for _, h := range m["block_hashes"].([]any) {
				out = append(out, toU64(t, h))
			}
			return out
		}
	}
	t.Fatalf("no BlockStored in batch")
	return nil
}

func TestFaultSlowFactor(t *testing.T) {
	s := startServer(t, testConfig())
	base := generate(t, s, seqTokens(1, 100), "", "", 1)
	if err := s.SetFaults(Faults{SlowFactor: 3}); err != nil {
		t.Fatal(err)
	}
	slow := generate(t, s, seqTokens(1000, 100), "", "", 1)
	if slow.TTFT != 3*base.TTFT {
		t.Fatalf("slowed TTFT %v, want 3 × %v", slow.TTFT, base.TTFT)
	}
}

func TestFaultFailRequests(t *testing.T) {
	s := startServer(t, testConfig())
	resp, b := post(t, s.URL()+"/admin/faults", `{"fail_fraction":1,"fail_status":503}`)
	if resp.StatusCode != 200 {
		t.Fatalf("set faults: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, s.URL()+"/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":[1,2,3]}`)
	var e apiErr
	if resp.StatusCode != 503 || json.Unmarshal(b, &e) != nil || e.Error.Type != "ServiceUnavailableError" {
		t.Fatalf("failed request: %d %s", resp.StatusCode, b)
	}
	_, b = post(t, s.URL()+"/admin/faults", `{"fail_fraction":1}`)
	if resp, _ := post(t, s.URL()+"/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":[1,2,3]}`); resp.StatusCode != 500 {
		t.Fatalf("fail_status default: %d (faults %s)", resp.StatusCode, b)
	}
	post(t, s.URL()+"/admin/faults", `{}`)
	if resp, b := post(t, s.URL()+"/v1/completions", `{"model":"Qwen/Qwen3-0.6B","prompt":[1,2,3],"max_tokens":1}`); resp.StatusCode != 200 {
		t.Fatalf("after clearing faults: %d %s", resp.StatusCode, b)
	}
}

func TestFaultCutStreams(t *testing.T) {
	s := startServer(t, testConfig())
	if err := s.SetFaults(Faults{CutStreamFraction: 1}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(s.URL()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"Qwen/Qwen3-0.6B","prompt":[1,2,3,4],"max_tokens":10,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("stream ended cleanly: %s", body)
	}
	if strings.Contains(string(body), "[DONE]") || !strings.Contains(string(body), "data: ") {
		t.Fatalf("cut stream body: %q", body)
	}
	eventually(t, "the cut request to leave the engine", func() bool { running, waiting, _ := s.Load(); return running+waiting == 0 })
}

func TestFaultRequestValidation(t *testing.T) {
	s := startServer(t, testConfig())
	for _, body := range []string{
		`{"drop_events_fraction":1.5}`,
		`{"fail_status":404}`,
		`{"slow_factor":-1}`,
		`{"no_such_fault":true}`,
		`[1]`,
	} {
		resp, b := post(t, s.URL()+"/admin/faults", body)
		if resp.StatusCode != 400 {
			t.Errorf("%s: status %d %s", body, resp.StatusCode, b)
		}
	}
	if f := s.Faults(); f != (Faults{}) {
		t.Fatalf("a rejected request changed the faults: %+v", f)
	}
	resp, err := http.Get(s.URL() + "/admin/faults")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var f Faults
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil || f != (Faults{}) {
		t.Fatalf("GET faults: %+v %v", f, err)
	}
}
