package bench

import "testing"

func seq(from, n uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

func TestOracle(t *testing.T) {
	const B = 4
	doc := seq(100, 12) // 3 full blocks
	p := func(seed uint64, parts ...[]uint32) Prompt {
		var ids []uint32
		for _, x := range parts {
			ids = append(ids, x...)
		}
		return Prompt{Seed: seed, IDs: ids}
	}
	prompts := []Prompt{
		p(1, doc, seq(1, 5)),             // 17 tokens, cold: 0
		p(1, doc, seq(50, 6)),            // 18 tokens: doc's 3 blocks hit = 12
		p(2, doc, seq(50, 6)),            // other seed (salt/model): 0
		p(1, doc),                        // 12 tokens, all cached, but the last token is computed: 2 blocks = 8
		p(1, seq(100, 3)),                // 3 tokens: no full block
		p(1, doc, seq(50, 6), seq(9, 2)), // 20 tokens: 4 blocks cached (doc + [50..53]) = 16
	}
	res := Oracle(prompts, B)
	want := []int{0, 12, 0, 8, 0, 16}
	for i, w := range want {
		if res.PerRequest[i] != w {
			t.Errorf("request %d: %d hit tokens, want %d", i, res.PerRequest[i], w)
		}
	}
	if res.HitTokens != 36 || res.QueryTokens != 17+18+18+12+3+20 {
		t.Fatalf("totals %d/%d", res.HitTokens, res.QueryTokens)
	}
	if got, want := res.HitRate(), 36.0/88; got != want {
		t.Fatalf("hit rate %v, want %v", got, want)
	}
	if (OracleResult{}).HitRate() != 0 {
		t.Fatal("empty oracle should have hit rate 0")
	}
}
