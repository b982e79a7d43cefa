package agent

import (
	"math/rand/v2"
	"testing"
)

// TestTableMatchesMap runs random inserts, updates and deletes (including the zero key
// and keys crowding a few home slots) against a Go map.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, space := range []uint64{8, 300, 1 << 40} {
		var tb table[int]
		ref := map[uint64]int{}
		for i := range 60000 {
			k := rng.Uint64N(space)
			if space == 1<<40 {
				k <<= 20 // structured keys: only high bits differ
			}
			switch rng.IntN(3) {
			case 0, 1:
				v, existed := tb.upsert(k)
				_, refOK := ref[k]
				if existed != refOK {
					t.Fatalf("op %d: upsert(%x) existed=%v, map says %v", i, k, existed, refOK)
				}
				*v += i
				ref[k] += i
			case 2:
				if got, want := tb.del(k), func() bool { _, ok := ref[k]; return ok }(); got != want {
					t.Fatalf("op %d: del(%x)=%v, want %v", i, k, got, want)
				}
				delete(ref, k)
			}
			if i%4999 == 0 {
				checkTable(t, &tb, ref)
			}
		}
		checkTable(t, &tb, ref)
		tb.reset()
		if tb.Len() != 0 || tb.get(1) != nil {
			t.Fatal("reset left keys")
		}
	}
}

func checkTable(t *testing.T, tb *table[int], ref map[uint64]int) {
	t.Helper()
	if tb.Len() != len(ref) {
		t.Fatalf("len %d, want %d", tb.Len(), len(ref))
	}
	for k, want := range ref {
		if v := tb.get(k); v == nil || *v != want {
			t.Fatalf("get(%x) = %v, want %d", k, v, want)
		}
	}
	n := 0
	tb.each(func(k uint64, v *int) {
		n++
		if ref[k] != *v {
			t.Fatalf("each: %x=%d, want %d", k, *v, ref[k])
		}
	})
	if n != len(ref) {
		t.Fatalf("each visited %d, want %d", n, len(ref))
	}
}
