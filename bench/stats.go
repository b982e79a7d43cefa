package bench

import (
	"math"
	"sort"
)

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of values by linear interpolation
// between the closest ranks (the same definition as numpy's default), NaN when empty.
// values need not be sorted; it is not modified.
func Percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), values...)
	sort.Float64s(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	p = math.Max(0, math.Min(100, p))
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	return s[lo] + (s[hi]-s[lo])*(rank-float64(lo))
}

// CDFPoint is one step of an empirical distribution: a fraction F of values are ≤ X.
type CDFPoint struct {
	X float64 `json:"x"`
	F float64 `json:"f"`
}

// CDF returns the empirical CDF of values reduced to at most n points (evenly spaced in F,
// always including the minimum and maximum).
func CDF(values []float64, n int) []CDFPoint {
	if len(values) == 0 || n < 2 {
		return nil
	}
	s := append([]float64(nil), values...)
	sort.Float64s(s)
	if n > len(s) {
		n = len(s)
	}
	out := make([]CDFPoint, 0, n)
	for i := 0; i < n; i++ {
		idx := 0
		if n > 1 {
			idx = int(math.Round(float64(i) * float64(len(s)-1) / float64(n-1)))
		}
		out = append(out, CDFPoint{X: s[idx], F: float64(idx+1) / float64(len(s))})
	}
	return out
}

// Bucket is one cumulative bucket of a Prometheus histogram: Count observations ≤ UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// HistogramQuantile estimates the q-quantile (0..1) of a cumulative histogram the way
// Prometheus' histogram_quantile does: linear interpolation inside the bucket holding the
// rank, the lower bound of the first bucket taken as 0, the +Inf bucket answered by the
// highest finite bound. NaN when there are no observations.
func HistogramQuantile(q float64, buckets []Bucket) float64 {
	if len(buckets) == 0 {
		return math.NaN()
	}
	b := append([]Bucket(nil), buckets...)
	sort.Slice(b, func(i, j int) bool { return b[i].UpperBound < b[j].UpperBound })
	total := b[len(b)-1].Count
	if total == 0 {
		return math.NaN()
	}
	rank := math.Max(0, math.Min(1, q)) * total
	lowerBound, lowerCount := 0.0, 0.0
	for i, bk := range b {
		if bk.Count >= rank {
			if math.IsInf(bk.UpperBound, 1) {
				if i == 0 {
					return math.NaN()
				}
				return b[i-1].UpperBound
			}
			if bk.Count == lowerCount {
				return bk.UpperBound
			}
			return lowerBound + (bk.UpperBound-lowerBound)*(rank-lowerCount)/(bk.Count-lowerCount)
		}
		lowerBound, lowerCount = bk.UpperBound, bk.Count
	}
	return b[len(b)-1].UpperBound
}
