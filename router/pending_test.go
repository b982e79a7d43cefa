package router

import "testing"

func TestPendingRunsAndExpiry(t *testing.T) {
	p := newPending(1024)
	keys := []uint64{1, 2, 3, 4, 5}
	p.add(keys, 7, 100, 0)
	if n := p.run(keys, 7, 50); n != 5 {
		t.Fatalf("run %d, want 5", n)
	}
	if n := p.run(keys, 8, 50); n != 0 {
		t.Fatalf("other instance run %d", n)
	}
	if n := p.run([]uint64{1, 2, 9, 4}, 7, 50); n != 2 {
		t.Fatalf("run stops at the first miss: %d", n)
	}
	if n := p.run(keys, 7, 100); n != 0 {
		t.Fatalf("expired run %d", n)
	}
	p.add(keys, 7, 200, 100)
	p.expireBy(keys[2:], 7, 120, 110)
	if n := p.run(keys, 7, 130); n != 2 {
		t.Fatalf("after expireBy run %d, want 2", n)
	}
	// Re-adding the same key updates in place rather than duplicating.
	p.add(keys, 7, 300, 130)
	if live := p.live(130); live != 5 {
		t.Fatalf("live %d, want 5", live)
	}
}

// The table is bounded: adding far more keys than it holds never grows it, and the most
// recent keys win.
func TestPendingBounded(t *testing.T) {
	p := newPending(64)
	size := len(p.slots)
	keys := make([]uint64, 10000)
	for i := range keys {
		keys[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	for i := range keys {
		p.add(keys[i:i+1], 1, int64(1000+i), 0)
	}
	if len(p.slots) != size || p.live(0) > size {
		t.Fatalf("table grew: %d slots, %d live", len(p.slots), p.live(0))
	}
	if p.run(keys[len(keys)-1:], 1, 0) != 1 {
		t.Fatal("latest key lost")
	}
}

func BenchmarkPendingRun512(b *testing.B) {
	p := newPending(1 << 18)
	keys := make([]uint64, 512)
	for i := range keys {
		keys[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	p.add(keys, 3, 1<<62, 0)
	b.ReportAllocs()
	for b.Loop() {
		if p.run(keys, 3, 1) != 512 {
			b.Fatal("miss")
		}
	}
}
