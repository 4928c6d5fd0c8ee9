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

// A sliding window reads its previous window's count through its cell,
// whichever of the two cells was written first, and not once the previous
// window's cell was dropped, until that window is written again.
func TestPreviousWindowFoundWhicheverCameFirst(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	now := storetest.T0
	w := now.UnixNano() / int64(time.Minute)
	at := func(window, amount int64) limiter.Charge {
		return limiter.Charge{Counter: limiter.Counter{Rule: "w", Kind: limiter.KindRequests, Window: window},
			Period: time.Minute, Limit: 1 << 40, Amount: amount}
	}
	prevOf := func(when time.Time) int64 {
		t.Helper()
		st, err := s.Read(ctx, when, []limiter.Charge{at(w+1, 0)})
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Prev
	}
	charge := func(when time.Time, c limiter.Charge) {
		t.Helper()
		if out, err := s.Charge(ctx, when, []limiter.Charge{c}, nil); err != nil || !out.Admitted {
			t.Fatalf("charge refused: %v %+v", err, out)
		}
	}
	next := now.Add(time.Minute)
	charge(next, at(w+1, 1)) // the current window first
	charge(now, at(w, 3))    // then the one before it
	if got := prevOf(next); got != 3 {
		t.Fatalf("previous window %d, want 3", got)
	}
	charge(next, at(w, 2))
	if got := prevOf(next); got != 5 {
		t.Fatalf("previous window %d, want 5", got)
	}
	// Past window w's expiry (its end, a period, an hour of grace) but
	// not w+1's, a charge sweeps w's cell away.
	late := time.Unix(0, (w+1)*int64(time.Minute)).Add(time.Minute + time.Hour + time.Second)
	charge(late, at(w+1, 1))
	if got := prevOf(late); got != 0 {
		t.Fatalf("previous window %d after it was dropped, want 0", got)
	}
	charge(late, at(w, 4))
	if got := prevOf(late); got != 4 {
		t.Fatalf("previous window %d written again, want 4", got)
	}
}

// A counter charged again is found through the store's cache of recent
// cells, but never on a cell that was dropped: a gauge emptied (its cell
// dropped) and charged again counts on its new cell.
func TestRecentCellsNeverStale(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	now := storetest.T0
	g := limiter.Charge{Counter: limiter.Counter{Rule: "g", Kind: limiter.KindInFlight}, Limit: 2, Amount: 1}
	lease := func(id string) *limiter.Lease {
		return &limiter.Lease{ID: id, AdmittedAt: now, ExpiresAt: now.Add(time.Minute), Charges: []limiter.Charge{g}}
	}
	for round := range 3 {
		var held []*limiter.Lease
		for i := range 2 {
			l := lease(string(rune('a'+round)) + string(rune('0'+i)))
			if out, err := s.Charge(ctx, now, []limiter.Charge{g}, l); err != nil || !out.Admitted {
				t.Fatalf("round %d slot %d refused: %v %+v", round, i, err, out.States)
			}
			held = append(held, l)
		}
		if out, _ := s.Charge(ctx, now, []limiter.Charge{g}, lease("over")); out.Admitted {
			t.Fatalf("round %d: a third slot of 2 admitted", round)
		}
		for _, l := range held {
			if err := s.Complete(ctx, now, l, limiter.Usage{}); err != nil {
				t.Fatal(err)
			}
		}
		if st, _ := s.Read(ctx, now, []limiter.Charge{g}); st[0].Cur != 0 {
			t.Fatalf("round %d: %d in flight after every slot was given back", round, st[0].Cur)
		}
	}
}
