package agent

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/proto"

	"github.com/kvroute/kvroute/internal/natsutil"
	"github.com/kvroute/kvroute/kvblock"
	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// TestSnapshotMillionKeys mirrors more than a million blocks received over real ZMQ and
// checks both NATS paths under a server max payload of 256 KiB: the published batches
// (split into consecutive seqs, each under the max payload) and a snapshot (chunks under
// the max payload, tagged with the agent's epoch and seq, holding every key once).
func TestSnapshotMillionKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: a million blocks through decode, mirror and NATS")
	}
	const (
		maxPayload = 256 << 10
		batches    = 64
		perBatch   = 16400 // 64 × 16400 = 1,049,600 blocks
	)
	srv, err := natsutil.StartServer(natsutil.ServerConfig{Port: -1, MaxPayloadBytes: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsutil.Connect(natsutil.ClientConfig{URL: srv.ClientURL(), Name: t.Name(), Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if nc.MaxPayload() != maxPayload {
		t.Fatalf("server max payload %d, want %d", nc.MaxPayload(), maxPayload)
	}
	e := newFakeEngine(t, "m", 0)
	a, _, _ := runAgent(t, e, nc, func(c *Config) { c.Model, c.BlockSize = "m", 1 })

	// A subscriber applying the published batches.
	var mu sync.Mutex
	published := map[uint64]bool{}
	var lastSeq uint64
	var pubErrs []string
	sub, err := nc.Subscribe(kvroutev1.SubjectEvents+a.ID(), func(m *nats.Msg) {
		var b kvroutev1.EventBatch
		mu.Lock()
		defer mu.Unlock()
		if err := proto.Unmarshal(m.Data, &b); err != nil {
			pubErrs = append(pubErrs, err.Error())
			return
		}
		if b.Seq != lastSeq+1 && lastSeq != 0 {
			pubErrs = append(pubErrs, "seq jump")
		}
		lastSeq = b.Seq
		for _, k := range b.Removed {
			delete(published, k)
		}
		for _, s := range b.Stored {
			for _, k := range s.Keys {
				published[k] = true
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	start := time.Now()
	seed := kvblock.Seed("m", "", "")
	want := make([]uint64, 0, batches*perBatch)
	for i := range batches {
		hashes := make([]uint64, perBatch)
		tokens := make([]uint32, perBatch)
		for j := range perBatch {
			hashes[j] = uint64(i)<<32 | uint64(j) + 1
			tokens[j] = uint32(i*perBatch + j)
		}
		want = kvblock.Keys(want, seed, tokens, 1)
		payload, err := msgpack.Marshal([]any{1.7e9, []any{[]any{"BlockStored", hashes, nil, tokens, 1, nil, "GPU", nil, nil}}, 0})
		if err != nil {
			t.Fatal(err)
		}
		e.send(payload, false)
	}
	slices.Sort(want)
	if n := len(slices.Compact(slices.Clone(want))); n < 1_000_000 {
		t.Fatalf("only %d distinct keys", n)
	}
	eventuallyWithin(t, 3*time.Minute, "agent mirror holds every block", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.mir.numKeys() == len(want)
	}, func() { t.Logf("mirror holds %d of %d keys", len(a.Keys()), len(want)) })
	mirrored := time.Since(start)
	if !slices.Equal(a.Keys(), want) {
		t.Fatal("mirror keys differ from the engine's blocks")
	}
	eventuallyWithin(t, 3*time.Minute, "published batches carry every key", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(published) == len(want)
	}, nil)
	mu.Lock()
	for _, e := range pubErrs {
		t.Error(e)
	}
	mu.Unlock()

	// The snapshot, with no per-request chunk limit: the agent's own limits apply.
	epoch, seq := a.Epoch()
	inbox := nc.NewRespInbox()
	chunks := make(chan *nats.Msg, 4096)
	csub, err := nc.ChanSubscribe(inbox, chunks)
	if err != nil {
		t.Fatal(err)
	}
	defer csub.Unsubscribe()
	req, _ := proto.Marshal(&kvroutev1.SnapshotRequest{Instance: a.ID(), Requester: "test"})
	if err := nc.PublishRequest(kvroutev1.SubjectSnapshot+a.ID(), inbox, req); err != nil {
		t.Fatal(err)
	}
	got := make([]uint64, 0, len(want))
	next := uint32(0)
	timeout := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case m := <-chunks:
			if len(m.Data) > maxPayload {
				t.Fatalf("chunk %d of %d bytes > max payload %d", next, len(m.Data), maxPayload)
			}
			var c kvroutev1.SnapshotChunk
			if err := proto.Unmarshal(m.Data, &c); err != nil {
				t.Fatal(err)
			}
			if c.Error != "" {
				t.Fatalf("snapshot error: %s", c.Error)
			}
			if c.Chunk != next || c.Epoch != epoch || c.Seq != seq || c.Instance != a.ID() || c.TotalKeys != uint64(len(want)) || c.BlockSize != 1 {
				t.Fatalf("chunk %d: got chunk=%d epoch=%d seq=%d instance=%q total=%d block_size=%d; want epoch %d seq %d",
					next, c.Chunk, c.Epoch, c.Seq, c.Instance, c.TotalKeys, c.BlockSize, epoch, seq)
			}
			got = append(got, c.Keys...)
			next++
			done = c.Last
		case <-timeout:
			t.Fatalf("snapshot incomplete after %d chunks, %d keys", next, len(got))
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("snapshot holds %d keys, want the %d of the mirror", len(got), len(want))
	}
	if next < 2 {
		t.Fatalf("a million keys in %d chunk(s)", next)
	}
	t.Logf("%d keys in %d snapshot chunks (max payload %d bytes); published up to seq %d; mirrored after %v",
		len(got), next, maxPayload, seq, mirrored.Round(time.Millisecond))
}
