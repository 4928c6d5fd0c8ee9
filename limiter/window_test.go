package limiter

import (
	"math"
	"testing"
	"time"
)

// A charge's elapsed time in its window, found without a division when
// the instant is in the charge's own window, is windowAt's for any
// window, period and instant, and so are the sliding window's ceiling and
// what it leaves.
func FuzzWindowElapsed(f *testing.F) {
	f.Add(int64(29_000_000), int64(time.Minute), int64(29_000_000)*int64(time.Minute)+5, int64(3), int64(10))
	f.Add(int64(0), int64(1), int64(0), int64(0), int64(0))
	f.Add(int64(-1), int64(time.Hour), int64(-1), int64(1), int64(math.MaxInt64))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(-5), int64(math.MinInt64))
	f.Add(int64(153_722_867), int64(time.Minute), int64(math.MaxInt64), int64(math.MaxInt64), int64(1))
	f.Fuzz(func(t *testing.T, window, period, ns, prev, limit int64) {
		if period <= 0 {
			return
		}
		now := time.Unix(0, ns)
		c := Charge{Counter: Counter{Kind: KindRequests, Window: window}, Period: time.Duration(period), Limit: limit, Amount: 1}
		_, want := windowAt(now, c.Period)
		if got := c.elapsed(now); got != want {
			t.Fatalf("elapsed %d, windowAt %d", got, want)
		}
		for _, p := range []int64{prev, 0, -prev} {
			T := uint64(period)
			room, used := mul(nonneg(limit), T), mul(nonneg(p), T-uint64(want))
			ceil := int64(-1)
			if !room.less(used) {
				ceil = int64(room.sub(used).divCap(T, nonneg(limit))) - 1
			}
			if got := slidingCeiling(limit, p, 1, c.Period, want); got != ceil {
				t.Fatalf("prev %d: ceiling %d, by the formula %d", p, got, ceil)
			}
			decayed := int64(mul(nonneg(p), T-uint64(want)).add(T-1).divCap(T, nonneg(p)))
			if got, left := slidingRemaining(limit, p, 2, c.Period, want), max(0, limit-2-decayed); got != left {
				t.Fatalf("prev %d: remaining %d, by the formula %d", p, got, left)
			}
		}
	})
}
