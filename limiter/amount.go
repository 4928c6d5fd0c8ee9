package limiter

import (
	"errors"
	"math"
	"math/bits"
)

// MaxAmount bounds every amount the limiter charges, settles or reports: a
// request's input estimate, its output reservation, a usage report. It is
// far beyond any real request (a million-token prompt is 2^20) and far below
// where sums of a few such amounts could leave int64 (2^63), so counters,
// reservations and corrections stay exact.
const MaxAmount int64 = 1 << 50

// MaxLeaseIDLen bounds a lease id: a slot item holds the ids of the leases
// it admitted, so their length is part of what every slot write costs.
const MaxLeaseIDLen = 64

// ErrInvalidAmount is returned for a request or charge whose amount is
// negative or above MaxAmount: a caller's bug, never a client's input (the
// gateway refuses absurd sizes with 400 before admission).
var ErrInvalidAmount = errors.New("limiter: amount outside 0..MaxAmount")

// ErrInvalidLease is returned for a lease whose id is empty or longer than
// MaxLeaseIDLen.
var ErrInvalidLease = errors.New("limiter: invalid lease id")

// validAmount reports whether v may be charged.
func validAmount(v int64) bool { return v >= 0 && v <= MaxAmount }

// clampAmount bounds a reported amount to 0..MaxAmount: what an upstream
// says it used is input too.
func clampAmount(v int64) int64 { return min(max(v, 0), MaxAmount) }

// SatAdd returns a+b, saturated to the int64 range.
func SatAdd(a, b int64) int64 {
	s := a + b
	// Overflow happened iff both operands have the sign the sum lacks.
	if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
		if a > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// SatMul returns a·b for non-negative a and b, saturated at MaxInt64.
func SatMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// CheckCharges returns ErrInvalidAmount if a charge's amount or limit is
// out of range: the guard every Store applies before it writes.
func CheckCharges(charges []Charge) error {
	for i := range charges {
		if !validAmount(charges[i].Amount) || charges[i].Limit < 0 {
			return ErrInvalidAmount
		}
	}
	return nil
}

// CheckLease returns ErrInvalidLease for a lease a store cannot record.
func CheckLease(l *Lease) error {
	if l != nil && (l.ID == "" || len(l.ID) > MaxLeaseIDLen) {
		return ErrInvalidLease
	}
	return nil
}
