package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHistoryRingAndDecisionRates(t *testing.T) {
	var n int64
	src := func() Sample {
		n++
		return Sample{
			TimeMs:    n * 1000,
			Fleet:     FleetSample{Decisions: map[string]uint64{"cache_hit": uint64(10 * n), "overflow": 2}},
			Instances: []InstanceSample{{ID: "a", CachedBlocks: uint64(n)}},
		}
	}
	d, err := New(Config{SampleInterval: time.Second, HistoryLength: 3}, src)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		d.SampleNow()
	}
	st := d.Stats()
	if len(st.History) != 3 {
		t.Fatalf("history length %d, want the ring size 3", len(st.History))
	}
	for i, p := range st.History {
		if want := int64(3+i) * 1000; p.TimeMs != want {
			t.Fatalf("history[%d].t=%d want %d (oldest first)", i, p.TimeMs, want)
		}
		if p.Instances["a"].CachedBlocks != uint64(3+i) {
			t.Fatalf("history[%d] instance a: %+v", i, p.Instances["a"])
		}
	}
	if st.Fleet.DecisionRate["cache_hit"] != 10 || st.Fleet.DecisionRate["overflow"] != 0 {
		t.Fatalf("decision rate %v, want cache_hit 10/s overflow 0/s", st.Fleet.DecisionRate)
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := New(Config{}, func() Sample { return Sample{} }); err == nil {
		t.Fatal("zero config accepted")
	}
}

func TestHandlerServesUIAndAPI(t *testing.T) {
	d, _ := New(DefaultConfig(), func() Sample {
		return Sample{Instances: []InstanceSample{{ID: "engine-1", State: "ready", HitRate: 0.5}}}
	})
	d.SampleNow()
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	get := func(path string) (*http.Response, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/dashboard/")
	if resp.StatusCode != 200 || !strings.Contains(body, `<script src="app.js">`) {
		t.Fatalf("index: %d %.200s", resp.StatusCode, body)
	}
	for _, asset := range []string{"/dashboard/app.js", "/dashboard/style.css"} {
		if resp, _ := get(asset); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", asset, resp.StatusCode)
		}
	}
	resp, body = get("/api/history")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("api: %d", resp.StatusCode)
	}
	var st struct {
		Instances []InstanceSample `json:"instances"`
		History   []json.RawMessage
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Instances) != 1 || st.Instances[0].ID != "engine-1" || st.Instances[0].HitRate != 0.5 || len(st.History) != 1 {
		t.Fatalf("api body: %s", body)
	}
}
