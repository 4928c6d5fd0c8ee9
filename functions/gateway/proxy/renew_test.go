package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
)

// A running request's lease is renewed every third of its TTL until its
// renewal stops, and never after; a renewal taken again for another
// request (its timer kept, renewals) renews that request's lease only.
func TestRenewalsRenewTheirOwnLease(t *testing.T) {
	rs, _ := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 10}}})
	const ttl = 60 * time.Millisecond
	l, err := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := providers.NewCatalog([]providers.Provider{mock.New("mock", 0)}, nil, nil)
	h, err := New(Config{Limiter: l, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	admit := func(id string) *limiter.Lease {
		d, err := l.Admit(context.Background(), time.Now(), limiter.Request{ID: id, Subject: limiter.Subject{UserPath: "/a", Provider: "mock", Model: "m"}})
		if err != nil || !d.Allowed || !d.Lease.HoldsSlots() {
			t.Fatalf("admit %s: %+v %v", id, d, err)
		}
		return d.Lease
	}
	// run renews lease for d, and gives its expiry before and once its
	// renewal has stopped.
	run := func(lease *limiter.Lease, id string, d time.Duration) (before, after time.Time) {
		before = lease.ExpiresAt
		r := h.renewWhileRunning(context.Background(), lease, id)
		time.Sleep(d)
		r.stop()
		return before, lease.ExpiresAt
	}
	a := admit("a")
	beforeA, afterA := run(a, "a", 4*ttl)
	if !afterA.After(beforeA) {
		t.Fatalf("lease a not renewed while running: %v, then %v", beforeA, afterA)
	}
	for range 3 {
		b := admit("b" + time.Now().String())
		beforeB, afterB := run(b, "b", 2*ttl)
		if !afterB.After(beforeB) {
			t.Fatalf("lease b not renewed while running: %v, then %v", beforeB, afterB)
		}
		if a.ExpiresAt != afterA {
			t.Fatalf("lease a renewed after its request ended: %v, then %v", afterA, a.ExpiresAt)
		}
	}
	if r := h.renewWhileRunning(context.Background(), &limiter.Lease{}, "none"); r != nil {
		t.Fatal("a renewal for a lease that holds no slot")
	}
}
