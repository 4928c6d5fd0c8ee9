package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/infra/metrics/statstest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
	"github.com/tollgate/tollgate/limiter/storetest"
)

func TestBehaviour(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		s := memstore.New()
		return func() limiter.Store { return s }
	})
}

// The embedded store keeps an expired lease long enough that a late
// completion's usage still reaches its change feed, and is settled once.
func TestLateCompletionSettled(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	now := storetest.T0.Add(time.Second)
	tok := limiter.Charge{Counter: limiter.Counter{Rule: "late", Kind: limiter.KindTokens, Window: now.UnixNano() / int64(time.Minute)},
		Period: time.Minute, Limit: 10000, Amount: 1000}
	g := limiter.Charge{Counter: limiter.Counter{Rule: "late-g", Kind: limiter.KindInFlight}, Limit: 1, Amount: 1}
	l := &limiter.Lease{ID: "late", AdmittedAt: now, ExpiresAt: now.Add(time.Minute), Charges: []limiter.Charge{tok, g},
		Reserved: limiter.Usage{InputTokens: 100, OutputTokens: 900}}
	if out, _ := s.Charge(ctx, now, []limiter.Charge{tok, g}, l); !out.Admitted {
		t.Fatal("refused")
	}
	if n, _ := s.Expire(ctx, now.Add(2*time.Minute)); n != 1 {
		t.Fatalf("expired %d", n)
	}
	if err := s.Complete(ctx, now.Add(3*time.Minute), l, limiter.Usage{InputTokens: 100, OutputTokens: 50, Exact: true}); err != nil {
		t.Fatal(err)
	}
	rc, _ := reconcile.New(reconcile.Config{Source: s.Feed(), Store: s})
	if _, err := rc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, now.Add(4*time.Minute), l, limiter.Usage{InputTokens: 100, OutputTokens: 50, Exact: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Read(ctx, now, []limiter.Charge{tok, g})
	if st[0].Cur != 150 || st[1].Cur != 0 {
		t.Fatalf("tokens %d, in flight %d; want 150 settled once and nothing in flight", st[0].Cur, st[1].Cur)
	}
}

func TestStats(t *testing.T) { statstest.Run(t, memstore.New()) }

// A charge finds each counter's cell once and adds to it: one counter
// charged twice in a call counts both, and a gauge whose expired lease is
// reclaimed during the call (which drops the gauge's emptied cell) is
// counted on the cell that remains.
func TestChargeCountsEachCellItFound(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	now := storetest.T0
	w := limiter.Charge{Counter: limiter.Counter{Rule: "w", Kind: limiter.KindRequests, Window: now.UnixNano() / int64(time.Minute)},
		Period: time.Minute, Limit: 10, Amount: 1}
	g := limiter.Charge{Counter: limiter.Counter{Rule: "g", Kind: limiter.KindInFlight}, Limit: 1, Amount: 1}
	old := &limiter.Lease{ID: "old", AdmittedAt: now, ExpiresAt: now.Add(time.Second), Charges: []limiter.Charge{g}}
	if out, _ := s.Charge(ctx, now, []limiter.Charge{g}, old); !out.Admitted {
		t.Fatal("first slot refused")
	}
	later := now.Add(2 * time.Second) // old has expired: its slot is reclaimed by the next charge that finds g full
	charges := []limiter.Charge{g, w, w}
	l := &limiter.Lease{ID: "new", AdmittedAt: later, ExpiresAt: later.Add(time.Minute), Charges: []limiter.Charge{g}}
	if out, _ := s.Charge(ctx, later, charges, l); !out.Admitted {
		t.Fatalf("refused: %+v", out.States)
	}
	st, _ := s.Read(ctx, later, []limiter.Charge{g, w})
	if st[0].Cur != 1 || st[1].Cur != 2 {
		t.Fatalf("in flight %d, requests %d; want 1 (the new lease's) and 2", st[0].Cur, st[1].Cur)
	}
}
