package admission

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// refresher is a Refresher whose Due answers due, and which records the
// calls of Refresh.
type refresher struct {
	due       bool
	asked     []time.Time // the instants Due was asked
	refreshed []time.Time // the instants Refresh was called with
	deadlines []time.Time // each call's deadline (zero: none)
}

func (r *refresher) Due(now time.Time) bool {
	r.asked = append(r.asked, now)
	return r.due
}

func (r *refresher) Refresh(ctx context.Context, now time.Time) {
	dl, _ := ctx.Deadline()
	r.refreshed, r.deadlines = append(r.refreshed, now), append(r.deadlines, dl)
}

func orchestrator(tb testing.TB, r Refresher, now time.Time) *Orchestrator {
	tb.Helper()
	l, err := limiter.New(limiter.Config{Store: memstore.New()})
	if err != nil {
		tb.Fatal(err)
	}
	cat, err := providers.NewCatalog(nil, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	o, err := New(Config{Limiter: l, Catalog: cat, Refresh: r, StoreTimeout: 300 * time.Millisecond, Now: func() time.Time { return now }})
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// A refresh is made, within the store deadline and at the instant it was
// found due, only when the refresher says it is due: a request between
// two refreshes sets up no deadline for nothing.
func TestRefreshOnlyWhenDue(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := &refresher{}
	o := orchestrator(t, r, now)
	o.Refresh(context.Background())
	if len(r.asked) != 1 || !r.asked[0].Equal(now) || len(r.refreshed) != 0 {
		t.Fatalf("not due: asked at %v, refreshed %d times; want asked once at %v, no refresh", r.asked, len(r.refreshed), now)
	}
	r.due = true
	before := time.Now()
	o.Refresh(context.Background())
	if len(r.refreshed) != 1 || !r.refreshed[0].Equal(now) {
		t.Fatalf("due: refreshed at %v, want once at %v", r.refreshed, now)
	}
	if dl := r.deadlines[0]; dl.IsZero() || dl.Before(before) || dl.After(time.Now().Add(300*time.Millisecond)) {
		t.Fatalf("due: refreshed with deadline %v, want within the store timeout (300 ms) of %v", dl, before)
	}
}

// BenchmarkRefresh is what the refresh before each admission costs a
// request: between two refreshes (not due), and, as every request paid
// before Due, a store deadline set up for a refresher that finds nothing
// to do (due, nothing read).
func BenchmarkRefresh(b *testing.B) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		due  bool
	}{{"not-due", false}, {"due-nothing-read", true}} {
		b.Run(c.name, func(b *testing.B) {
			o := orchestrator(b, quiet{due: c.due}, now)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				o.Refresh(ctx)
			}
		})
	}
}

// quiet is a Refresher that records nothing.
type quiet struct{ due bool }

func (q quiet) Due(time.Time) bool               { return q.due }
func (quiet) Refresh(context.Context, time.Time) {}
