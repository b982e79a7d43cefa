package bench

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	v := []float64{15, 20, 35, 40, 50}
	// numpy.percentile(v, [0, 25, 40, 50, 90, 100]) = 15, 20, 29, 35, 46, 50.
	for _, c := range []struct{ p, want float64 }{{0, 15}, {25, 20}, {40, 29}, {50, 35}, {90, 46}, {100, 50}} {
		if got := Percentile(v, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if v[0] != 15 || v[4] != 50 {
		t.Fatal("Percentile modified its input")
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Fatal("empty input should give NaN")
	}
	if Percentile([]float64{7}, 99) != 7 {
		t.Fatal("one value is every percentile")
	}
}

func TestCDF(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3}
	c := CDF(v, 10)
	if len(c) != 5 || c[0] != (CDFPoint{1, 0.2}) || c[4] != (CDFPoint{5, 1}) {
		t.Fatalf("CDF = %v", c)
	}
	big := make([]float64, 1000)
	for i := range big {
		big[i] = float64(i)
	}
	c = CDF(big, 11)
	if len(c) != 11 || c[0].X != 0 || c[10].X != 999 || c[10].F != 1 || c[5].X != 500 {
		t.Fatalf("reduced CDF = %v", c)
	}
}

func TestHistogramQuantile(t *testing.T) {
	// 10 observations ≤ 0.001, 90 in (0.001, 0.01], none above.
	b := []Bucket{{0.001, 10}, {0.01, 100}, {math.Inf(1), 100}}
	if got := HistogramQuantile(0.05, b); math.Abs(got-0.0005) > 1e-12 {
		t.Errorf("q0.05 = %v, want 0.0005", got)
	}
	if got := HistogramQuantile(0.55, b); math.Abs(got-0.0055) > 1e-12 {
		t.Errorf("q0.55 = %v, want 0.0055", got)
	}
	// Rank in the +Inf bucket → the highest finite bound.
	b2 := []Bucket{{0.001, 10}, {math.Inf(1), 20}}
	if got := HistogramQuantile(0.99, b2); got != 0.001 {
		t.Errorf("q0.99 in +Inf = %v, want 0.001", got)
	}
	if !math.IsNaN(HistogramQuantile(0.5, []Bucket{{1, 0}, {math.Inf(1), 0}})) {
		t.Error("no observations should give NaN")
	}
}
