package learn

import "testing"

func TestBucketsCoverInOrder(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<18; v++ {
		b := bucket(v)
		if b < prev {
			t.Fatalf("bucket(%d) = %d after %d", v, b, prev)
		}
		if Upper(b) < v {
			t.Fatalf("bucket %d holds %d but its upper bound is %d", b, v, Upper(b))
		}
		if v > 8 && float64(Upper(b)) > float64(v)*1.26 {
			t.Fatalf("bucket %d's bound %d is more than 26%% above %d", b, Upper(b), v)
		}
		prev = b
	}
}

func TestQuantile(t *testing.T) {
	var h Histogram
	if h.Quantile(0.95) != 0 {
		t.Fatal("an empty histogram has no quantile")
	}
	for i := range 100 {
		h.Add(int64(100 + i)) // 100..199
	}
	p95 := h.Quantile(0.95)
	if p95 < 194 || p95 > 240 {
		t.Fatalf("p95 of 100..199 read as %d", p95)
	}
	var o Histogram
	o.Add(5000)
	h.Merge(&o)
	if h.N() != 101 || h.Quantile(1) < 5000 {
		t.Fatalf("merged: n %d, max %d", h.N(), h.Quantile(1))
	}
}
