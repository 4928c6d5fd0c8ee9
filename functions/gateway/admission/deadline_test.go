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

func orchestrator(tb testing.TB, r Refresher, now func() time.Time) *Orchestrator {
	tb.Helper()
	l, err := limiter.New(limiter.Config{Store: memstore.New()})
	if err != nil {
		tb.Fatal(err)
	}
	cat, err := providers.NewCatalog(nil, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	o, err := New(Config{Limiter: l, Catalog: cat, Refresh: r, StoreTimeout: 300 * time.Millisecond, Now: now})
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// ticking is a clock a second further on each time it is read.
func ticking(t0 time.Time) func() time.Time {
	n := 0
	return func() time.Time {
		n++
		return t0.Add(time.Duration(n) * time.Second)
	}
}

// A refresh is made, within the store deadline and at the instant it was
// found due, only when the refresher says it is due: a request between
// two refreshes sets up no deadline for nothing.
func TestRefreshOnlyWhenDue(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := &refresher{}
	o := orchestrator(t, r, ticking(t0))
	o.Refresh(context.Background())
	if len(r.asked) != 1 || len(r.refreshed) != 0 {
		t.Fatalf("not due: asked %d times, refreshed %d times; want asked once, no refresh", len(r.asked), len(r.refreshed))
	}
	r.due = true
	before := time.Now()
	o.Refresh(context.Background())
	after := time.Now()
	if len(r.asked) != 2 || len(r.refreshed) != 1 || !r.refreshed[0].Equal(r.asked[1]) {
		t.Fatalf("due: asked at %v, refreshed at %v; want one refresh at the instant it was found due", r.asked, r.refreshed)
	}
	if dl := r.deadlines[0]; dl.Before(before.Add(300*time.Millisecond)) || dl.After(after.Add(300*time.Millisecond)) {
		t.Fatalf("due: refreshed with deadline %v, want the store timeout (300 ms) after the call, between %v and %v",
			dl, before.Add(300*time.Millisecond), after.Add(300*time.Millisecond))
	}
}

// While the store is stalled, a refresh that is not due is no probe of
// it: it reads nothing, so it must not mark the store answering (before
// Due it did, and the next requests waited out the store timeout again).
func TestRefreshNotDueIsNoProbe(t *testing.T) {
	o := orchestrator(t, &refresher{}, time.Now)
	o.health.note(time.Now(), context.DeadlineExceeded)
	o.Refresh(context.Background())
	if !o.StoreStalled() {
		t.Fatal("a refresh that read nothing marked the stalled store answering")
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
			o := orchestrator(b, quiet{due: c.due}, func() time.Time { return now })
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
