package limiter

import (
	"math/bits"
	"time"
)

// Window arithmetic. A windowed counter with period T is split into windows
// aligned to the Unix epoch: window w covers [w·T, (w+1)·T). The sliding
// estimate at elapsed time e into window w, with prev the final count of
// window w-1 and cur the count of window w, is
//
//	prev·(T−e)/T + cur
//
// and a charge of a is admitted when the estimate including it is at most the
// limit L. All comparisons are done exactly, in 128-bit integers over
// nanoseconds, so a decision never depends on floating-point rounding:
//
//	prev·(T−e) + (cur+a)·T ≤ L·T

// windowAt returns the index of the window of length period containing now,
// and how far into it now is.
func windowAt(now time.Time, period time.Duration) (int64, time.Duration) {
	ns := now.UnixNano()
	p := int64(period)
	w := ns / p
	if ns%p < 0 {
		w--
	}
	return w, time.Duration(ns - w*p)
}

// elapsed is how far now is into its window of the charge's period:
// windowAt's, found without a division when now is in the charge's own
// window, as it is when the charge was planned at now.
func (c *Charge) elapsed(now time.Time) time.Duration {
	if ns := now.UnixNano(); c.Counter.Window >= 0 && c.Period > 0 && ns >= 0 {
		hi, start := bits.Mul64(uint64(c.Counter.Window), uint64(c.Period))
		if hi == 0 && start <= uint64(ns) && uint64(ns)-start < uint64(c.Period) {
			return time.Duration(uint64(ns) - start)
		}
	}
	_, e := windowAt(now, c.Period)
	return e
}

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}

func (x u128) sub(y u128) u128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, borrow)
	return u128{hi, lo}
}

func (x u128) add(v uint64) u128 {
	lo, carry := bits.Add64(x.lo, v, 0)
	return u128{x.hi + carry, lo}
}

// divCap returns x/d, or limit when the quotient is at least limit.
func (x u128) divCap(d, limit uint64) uint64 {
	if x.hi >= d {
		return limit // quotient ≥ 2^64 > limit
	}
	q, _ := bits.Div64(x.hi, x.lo, d)
	return min(q, limit)
}

func nonneg(v int64) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(v)
}

// slidingCeiling returns the largest count the current window may hold
// before a charge of amount for the charge to be admitted; negative when no
// count admits it in this window.
func slidingCeiling(limit, prev, amount int64, period, elapsed time.Duration) int64 {
	if prev <= 0 {
		return max(limit, 0) - amount // limit·T / T, without the division
	}
	T := uint64(period)
	room := mul(nonneg(limit), T)
	used := mul(nonneg(prev), T-uint64(elapsed))
	if room.less(used) {
		return -1
	}
	// room-used ≤ limit·T, so the quotient fits in 64 bits.
	q := room.sub(used).divCap(T, nonneg(limit))
	return int64(q) - amount
}

// slidingWait returns how long after the instant (elapsed into the current
// window) a charge of amount would first be admitted if nothing else
// arrived, and false if it never would (it is larger than the limit).
func slidingWait(limit, prev, cur, amount int64, period, elapsed time.Duration) (time.Duration, bool) {
	if amount > limit {
		return 0, false
	}
	T := uint64(period)
	e := uint64(elapsed)
	prev, cur = int64(nonneg(prev)), int64(nonneg(cur))
	// In this window: prev·(T−e') ≤ K·T with K = L−cur−a, so
	// e' ≥ T − ⌊K·T/prev⌋.
	if k := limit - cur - amount; k >= 0 {
		if prev == 0 {
			return 0, true
		}
		x := mul(uint64(k), T).divCap(uint64(prev), T)
		if at := T - x; at < T {
			if at <= e {
				return 0, true
			}
			return time.Duration(at - e), true
		}
	}
	// In the next window cur becomes prev and nothing else has arrived:
	// cur·(T−e'') ≤ (L−a)·T, so e'' ≥ T − ⌊(L−a)·T/cur⌋. e'' = T is the start
	// of the window after, where the request is surely admitted.
	at := uint64(0)
	if cur > 0 {
		at = T - mul(uint64(limit-amount), T).divCap(uint64(cur), T)
	}
	return time.Duration(T - e + at), true
}

// slidingRemaining returns what is left of the limit under the estimate,
// rounded down to a whole unit and never negative.
func slidingRemaining(limit, prev, cur int64, period, elapsed time.Duration) int64 {
	if prev <= 0 {
		return max(0, limit-nonneg64(cur))
	}
	T := uint64(period)
	// ⌈prev·(T−e)/T⌉
	decayed := int64(mul(nonneg(prev), T-uint64(elapsed)).add(T-1).divCap(T, uint64(nonneg(prev))))
	return max(0, limit-nonneg64(cur)-decayed)
}

func nonneg64(v int64) int64 { return max(v, 0) }

// slidingReset returns how long until the estimate is back at zero if
// nothing else arrives: the current window's count weighs on the whole next
// window.
func slidingReset(prev, cur int64, period, elapsed time.Duration) time.Duration {
	switch {
	case cur > 0:
		return 2*period - elapsed
	case prev > 0:
		return period - elapsed
	}
	return 0
}
