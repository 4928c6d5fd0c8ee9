// Package learn keeps what requests really use, for reservations that
// learn: a histogram of output tokens on a logarithmic scale (four buckets
// an octave, so a quantile is known to within 19 %, rounded up), whose
// counts add across instances and runs.
package learn

import "math/bits"

// Buckets is the number of buckets: up to 2^18 tokens, past any model's
// output.
const Buckets = 4*18 + 2 // and a last one for anything larger

// Histogram counts observations by bucket.
type Histogram [Buckets]int64

// bucket returns the bucket of v: 0 for v ≤ 1, then four per octave.
func bucket(v int64) int {
	if v <= 1 {
		return 0
	}
	o := 63 - bits.LeadingZeros64(uint64(v)) // 2^o ≤ v < 2^(o+1)
	frac := int((v - 1<<o) * 4 >> o)         // which quarter of the octave
	return min(1+4*o+frac, Buckets-1)
}

// Upper is the largest value bucket i holds, the value a quantile in it
// is read as: never below the truth.
func Upper(i int) int64 {
	if i <= 0 {
		return 1
	}
	if i >= Buckets-1 {
		return 1<<62 - 1
	}
	return lower(i+1) - 1
}

// lower is the smallest value of bucket i ≥ 1: 2^o plus frac quarters of
// 2^o, rounded up.
func lower(i int) int64 {
	o, frac := int64((i-1)/4), int64((i-1)%4)
	return 1<<o + (frac<<o+3)/4
}

// Add counts v.
func (h *Histogram) Add(v int64) { h[bucket(v)]++ }

// Merge adds o's counts.
func (h *Histogram) Merge(o *Histogram) {
	for i := range h {
		h[i] += o[i]
	}
}

// N is how many observations h holds.
func (h *Histogram) N() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns the value at or below which a fraction q of the
// observations fall, read as its bucket's upper bound; 0 with none.
func (h *Histogram) Quantile(q float64) int64 {
	n := h.N()
	if n == 0 {
		return 0
	}
	want := int64(q*float64(n) + 0.999999)
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= want {
			return Upper(i)
		}
	}
	return Upper(Buckets - 1)
}
