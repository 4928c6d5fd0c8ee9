package limiter

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Money is counted in integer micro-dollars (µ$): a budget's counter, a
// charge's amount and a price are exact integers, never floats.
const MicrosPerUSD = 1_000_000

// Price is what one model's tokens cost, in micro-dollars per million
// tokens: $2.50 per million input tokens is Input 2_500_000.
type Price struct {
	Input       int64
	Output      int64
	CachedInput int64 // input served from the provider's prompt cache
}

// IsZero reports whether the price is unset.
func (p Price) IsZero() bool { return p == Price{} }

// Cost returns what usage costs at p in micro-dollars, rounded up and at
// most MaxAmount: input and output at their prices, cached input at its
// own (taken out of InputTokens when it is counted there).
func (p Price) Cost(u Usage) int64 {
	in := clampAmount(u.InputTokens)
	if u.CachedInInput {
		in -= min(clampAmount(u.CachedInputTokens), in)
	}
	var hi, lo uint64
	for _, t := range [...]struct{ n, price int64 }{
		{in, p.Input},
		{u.OutputTokens, p.Output},
		{u.CachedInputTokens, p.CachedInput},
	} {
		h, l := bits.Mul64(uint64(clampAmount(t.n)), uint64(max(t.price, 0)))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry
	}
	const perMillion = 1_000_000
	if hi >= perMillion {
		return MaxAmount
	}
	q, r := bits.Div64(hi, lo, perMillion)
	if r > 0 {
		q++
	}
	return int64(min(q, uint64(MaxAmount)))
}

// reservedCost is what a lease reserved on a budget: its input estimate
// and output reservation at the lease's price.
func (l *Lease) reservedCost() int64 {
	return l.Price.Cost(Usage{InputTokens: l.Reserved.InputTokens, OutputTokens: l.Reserved.OutputTokens})
}

// FormatUSD writes micro-dollars as dollars with as many decimals as it
// takes, at least two: 5000000 is "5.00", 1234 is "0.001234".
func FormatUSD(micros int64) string {
	neg := micros < 0
	if neg {
		micros = -micros
	}
	whole, frac := micros/MicrosPerUSD, micros%MicrosPerUSD
	f := strconv.FormatInt(frac+MicrosPerUSD, 10)[1:] // six digits
	for len(f) > 2 && f[len(f)-1] == '0' {
		f = f[:len(f)-1]
	}
	s := strconv.FormatInt(whole, 10) + "." + f
	if neg {
		s = "-" + s
	}
	return s
}

// ParseUSD reads a decimal amount of dollars exactly, into micro-dollars:
// "5", "0.01", "2.50", "0.000075". More than six decimals, a sign, an
// exponent or an amount past MaxAmount micro-dollars is an error.
func ParseUSD(s string) (int64, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "$")
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && (!dot || frac == "") {
		return 0, fmt.Errorf("%q is not an amount of dollars", s)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("%q has more than six decimals (a micro-dollar is the smallest unit)", s)
	}
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, fmt.Errorf("%q is not an amount of dollars (digits and one '.')", s)
			}
		}
	}
	if len(strings.TrimLeft(whole, "0")) > 10 {
		return 0, fmt.Errorf("%q is more than the largest amount, $%s", s, FormatUSD(MaxAmount))
	}
	var w, f int64
	if whole != "" {
		w, _ = strconv.ParseInt(whole, 10, 64)
	}
	if frac != "" {
		f, _ = strconv.ParseInt((frac + "000000")[:6], 10, 64)
	}
	v := w*MicrosPerUSD + f
	if v > MaxAmount {
		return 0, fmt.Errorf("%q is more than the largest amount, $%s", s, FormatUSD(MaxAmount))
	}
	return v, nil
}
