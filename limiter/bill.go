package limiter

import (
	"context"
	"time"
)

// Bill charges usage that has already been spent (a batch the provider
// ran) to the rules that match s, at price, exactly once per id however
// often it is called: the token windows, token buckets and budgets of the
// consumer (user path, tag and key rules) and, when s names them, of the
// provider and model that served it, in their windows at now. Nothing is
// refused, since nothing can be undone; request windows and gauges are not
// charged. It reports whether this call applied the charge.
//
// The charge is a settlement of a lease that reserved nothing, so a
// store's exactly-once settlement is what makes it exactly once.
func (l *Limiter) Bill(ctx context.Context, now time.Time, id string, s Subject, used Usage, price Price) (bool, error) {
	var buf [16]match
	ms := l.rules.Load().appendMatches(buf[:0], s, false)
	planned, _ := l.plan(now, Request{ID: id, Subject: s, Price: price}, ms, nil)
	var charges []Charge
	for _, c := range planned {
		if c.Counter.Kind.IsSettled() { // shadow rules count too
			charges = append(charges, c)
		}
	}
	if len(charges) == 0 {
		return false, nil
	}
	used.Exact = true
	lease := &Lease{
		ID: id, AdmittedAt: now, ExpiresAt: now,
		UserPath: s.UserPath, Provider: s.Provider, Model: s.Model, Route: "batch",
		Price: price, Charges: charges,
	}
	n, err := l.store.Settle(ctx, []Settlement{{Lease: lease, Used: used.Clamped()}})
	return n > 0, err
}
