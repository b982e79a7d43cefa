package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestInternExact: long strings that share their first kilobytes, that are
// prefixes of one another, or that differ only in an escape decode exactly like
// encoding/json, whether they are seen for the first time or again.
func TestInternExact(t *testing.T) {
	base := strings.Repeat("shared system prompt \u00e9 \"quoted\" \\ line\n", 200)
	variants := []string{
		base,
		base + "tail",
		base[:len(base)-1],
		base + `\`,
		base + "\u2028",
		strings.Replace(base, "\n", "\t", 1),
		strings.Replace(base, "shared", "sharEd", 1),
	}
	for pass := range 3 {
		for i, v := range variants {
			content, _ := json.Marshal(v)
			body := []byte(fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%s},{"role":"user","content":%s}]}`, content, content))
			if !checkScan(t, body) {
				t.Fatalf("pass %d variant %d: the fast path gave up", pass, i)
			}
			r, err := ParseChat(body)
			if err != nil {
				t.Fatal(err)
			}
			if r.Messages[0]["content"] != v || r.Messages[1]["content"] != v {
				t.Fatalf("pass %d variant %d: content differs", pass, i)
			}
		}
	}
}

func TestInternBounded(t *testing.T) {
	var tab internTable
	tab.seed, tab.byPrefix = interned.seed, make(map[uint64][]*internEntry)
	for i := range internMaxEntries + 10 {
		raw := []byte(fmt.Sprintf("%05d%s", i, strings.Repeat("x", internMinBytes)))
		tab.put(raw, string(raw))
	}
	if tab.n != internMaxEntries {
		t.Fatalf("%d entries kept, limit %d", tab.n, internMaxEntries)
	}
	first := []byte(fmt.Sprintf("%05d%s\"", 0, strings.Repeat("x", internMinBytes)))
	if _, _, ok := tab.lookup(first); ok {
		t.Fatal("the oldest entry must have been evicted")
	}
	last := []byte(fmt.Sprintf("%05d%s\"", internMaxEntries+9, strings.Repeat("x", internMinBytes)))
	if s, n, ok := tab.lookup(last); !ok || n != len(last)-1 || s != string(last[:n]) {
		t.Fatal("the newest entry must be found")
	}
	// Without the closing quote right after, a stored text is not a match.
	if _, _, ok := tab.lookup(last[:len(last)-1]); ok {
		t.Fatal("a match must be followed by the closing quote")
	}
}
