package router

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// seqIDs is n token ids: prefix's ids then a tail unique to tail.
func seqIDs(prefix, prefixLen, tail, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		if i < prefixLen {
			ids[i] = uint32(prefix*100000 + i)
		} else {
			ids[i] = uint32(tail*1000000 + i)
		}
	}
	return ids
}

// The tracker keeps, per prefix, what every request counted for it shared, in whole
// blocks; ranks by decayed count; needs two requests; and keeps model and salt apart.
func TestHotPrefixesCommonPrefixAndRanking(t *testing.T) {
	h := newHotPrefixes(16, 64, 8192, time.Minute)
	now := time.Unix(1_000_000, 0)
	all := func(string) bool { return true }

	// Prefix 1: a 200-token system prompt, three questions of different lengths.
	for q := range 3 {
		h.record("m", "", seqIDs(1, 200, q+1, 230+q*40), now)
	}
	// Prefix 2: 500 shared tokens, two requests.
	h.record("m", "", seqIDs(2, 500, 7, 520), now)
	h.record("m", "", seqIDs(2, 500, 8, 600), now)
	// Prefix 3: seen once: not replayed.
	h.record("m", "", seqIDs(3, 300, 9, 330), now)
	// Too short to be worth warming (< MinMatchTokens): not tracked at all.
	h.record("m", "", seqIDs(4, 40, 1, 60), now)
	h.record("m", "", seqIDs(4, 40, 1, 60), now)

	top := h.top(10, all)
	if len(top) != 2 {
		t.Fatalf("replayable prefixes %d, want 2: %+v", len(top), top)
	}
	// Prefix 1 has three requests: first. Its shared part is 200 tokens → 192 in blocks.
	if got := top[0].ids; len(got) != 192 || !slices.Equal(got, seqIDs(1, 200, 0, 192)) {
		t.Fatalf("hottest prefix has %d ids, want the 192 shared ones", len(got))
	}
	if got := top[1].ids; len(got) != 496 || !slices.Equal(got, seqIDs(2, 500, 0, 496)) {
		t.Fatalf("second prefix has %d ids, want 496", len(got))
	}
	if h.replayable() != 2 {
		t.Fatalf("replayable %d", h.replayable())
	}
	if got := h.top(1, all); len(got) != 1 || len(got[0].ids) != 192 {
		t.Fatalf("top(1) = %d entries", len(got))
	}

	// The same tokens under another salt or model are other prefixes, replayed with them.
	h.record("m", "tenant", seqIDs(1, 200, 1, 230), now)
	h.record("m", "tenant", seqIDs(1, 200, 2, 230), now)
	h.record("lora", "", seqIDs(1, 200, 1, 230), now)
	h.record("lora", "", seqIDs(1, 200, 2, 230), now)
	top = h.top(10, all)
	if len(top) != 4 {
		t.Fatalf("%d prefixes after salt and adapter, want 4", len(top))
	}
	seen := map[string]bool{}
	for _, p := range top {
		seen[p.model+"/"+p.salt] = true
	}
	if !seen["m/tenant"] || !seen["lora/"] || !seen["m/"] {
		t.Fatalf("prefixes: %v", seen)
	}
	// The filter keeps only what a newcomer serves.
	if got := h.top(10, func(m string) bool { return m == "lora" }); len(got) != 1 || got[0].model != "lora" {
		t.Fatalf("filtered: %+v", got)
	}

	// Decay: much later, a prefix requested twice now outranks one requested three
	// times ten half-lives ago.
	later := now.Add(10 * time.Minute)
	h.record("m", "", seqIDs(5, 100, 1, 130), later)
	h.record("m", "", seqIDs(5, 100, 2, 130), later)
	if top = h.top(1, all); len(top[0].ids) != 96 || top[0].ids[0] != seqIDs(5, 100, 0, 1)[0] {
		t.Fatalf("after decay the hottest is %d ids starting %d, want prefix 5", len(top[0].ids), top[0].ids[0])
	}
}

// Memory is bounded: the table never grows past its capacity, and a prefix that keeps
// coming gets in and stays however many one-off prompts pass through.
func TestHotPrefixesBounded(t *testing.T) {
	h := newHotPrefixes(16, 64, 256, time.Hour)
	now := time.Unix(2_000_000, 0)
	for i := range 2000 {
		h.record("m", "", seqIDs(1000+i, 300, i, 300), now) // one-off, 300 tokens cut to 256
		if i%10 == 0 {
			h.record("m", "", seqIDs(7, 100, i, 150), now)
		}
		now = now.Add(time.Millisecond)
	}
	if len(h.entries) != 16 || len(h.byKey) != 16 {
		t.Fatalf("%d entries, %d keys, want 16", len(h.entries), len(h.byKey))
	}
	for _, e := range h.entries {
		if len(e.ids) > 256 || cap(e.ids) > 512 {
			t.Fatalf("entry keeps %d ids (cap %d), limit 256", len(e.ids), cap(e.ids))
		}
	}
	top := h.top(1, func(string) bool { return true })
	if len(top) != 1 || len(top[0].ids) != 96 || top[0].ids[0] != seqIDs(7, 100, 0, 1)[0] {
		t.Fatalf("the recurring prefix is not the hottest: %+v", top)
	}
}

// Recording a known prefix allocates nothing, nor does a new one once the slots' buffers
// have grown.
func TestHotPrefixesRecordAllocs(t *testing.T) {
	h := newHotPrefixes(16, 64, 8192, time.Minute)
	now := time.Unix(3_000_000, 0)
	known := seqIDs(1, 2000, 1, 2100)
	h.record("m", "", known, now)
	if a := testing.AllocsPerRun(200, func() { h.record("m", "", known, now) }); a != 0 {
		t.Fatalf("known prefix: %v allocs per record", a)
	}
	prompts := make([][]uint32, 64)
	for i := range prompts {
		prompts[i] = seqIDs(100+i, 2000, i, 2000)
	}
	for _, p := range prompts { // every slot grows to 2000 ids
		h.record("m", "", p, now)
	}
	i := 0
	if a := testing.AllocsPerRun(200, func() { h.record("m", "", prompts[i%64], now); i++ }); a != 0 {
		t.Fatalf("new prefixes into grown slots: %v allocs per record", a)
	}
}

// BenchmarkHotRecord is the per-request cost of pre-warming's tracking (done after the
// response, not in the routing decision): a known 2k-token prefix and a new one.
func BenchmarkHotRecord(b *testing.B) {
	for _, n := range []int{512, 2048, 8192} {
		b.Run(fmt.Sprintf("known-%d", n), func(b *testing.B) {
			h := newHotPrefixes(128, 64, 8192, time.Minute)
			ids := seqIDs(1, n, 1, n)
			now := time.Now()
			h.record("m", "", ids, now)
			b.ReportAllocs()
			for b.Loop() {
				h.record("m", "", ids, now)
			}
		})
	}
	b.Run("new-2048", func(b *testing.B) {
		h := newHotPrefixes(128, 64, 8192, time.Minute)
		prompts := make([][]uint32, 1024)
		for i := range prompts {
			prompts[i] = seqIDs(i, 2048, i, 2048)
		}
		now := time.Now()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			h.record("m", "", prompts[i%len(prompts)], now)
			i++
		}
	})
}

// sharedBlocks finds the common prefix in whole blocks, wherever the first difference is.
func TestSharedBlocks(t *testing.T) {
	a := seqIDs(1, 4096, 1, 4096)
	for _, diff := range []int{64, 65, 79, 80, 300, 1023, 1024, 1040, 4095} {
		b := slices.Clone(a)
		b[diff]++
		if got, want := sharedBlocks(a, b, 64), diff/16*16; got != want {
			t.Errorf("difference at %d: %d shared, want %d", diff, got, want)
		}
	}
	if got := sharedBlocks(a, a[:2048], 64); got != 2048 {
		t.Errorf("prefix of itself: %d", got)
	}
	if got := sharedBlocks(a[:64], a, 64); got != 64 {
		t.Errorf("only the key part: %d", got)
	}
}
