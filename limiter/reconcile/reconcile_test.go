package reconcile_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// sliceSource yields fixed batches.
type sliceSource struct {
	batches   [][]reconcile.Change
	committed int
	failNext  bool
	onNext    func() // called for each batch read, e.g. to advance a clock
}

func (s *sliceSource) Next(context.Context, int) (*reconcile.Batch, error) {
	if s.committed >= len(s.batches) {
		return nil, nil
	}
	if s.onNext != nil {
		s.onNext()
	}
	b := s.batches[s.committed]
	return &reconcile.Batch{Changes: b, Commit: func(context.Context) error {
		if s.failNext {
			s.failNext = false
			return errors.New("checkpoint write failed")
		}
		s.committed++
		return nil
	}}, nil
}

// failingStore fails Settle when a settlement's lease is named poison.
type failingStore struct {
	reconcile.Store
	poison string
}

func (f *failingStore) Settle(ctx context.Context, ss []limiter.Settlement) (int, error) {
	for _, s := range ss {
		if s.Lease.ID == f.poison {
			return 0, errors.New("injected settle failure")
		}
	}
	return f.Store.Settle(ctx, ss)
}

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func completed(id string, reserved, used int64) reconcile.Change {
	c := limiter.Charge{Counter: limiter.Counter{Rule: "r", Kind: limiter.KindTokens, Window: 1}, Period: time.Minute, Amount: reserved}
	return reconcile.Change{
		ID: id, Kind: reconcile.Completed, At: t0,
		Lease: limiter.Lease{ID: "lease-" + id, Route: "chat", ExpiresAt: t0.Add(time.Hour), Reserved: limiter.Usage{OutputTokens: reserved}, Charges: []limiter.Charge{c}},
		Used:  limiter.Usage{OutputTokens: used, Exact: true},
	}
}

func TestApplyReportsFailuresFromTheFirstUnapplied(t *testing.T) {
	var changes []reconcile.Change
	for i := range 250 {
		changes = append(changes, completed(strconv.Itoa(i), 100, 40))
	}
	store := &failingStore{Store: memstore.New(), poison: "lease-130"}
	rc, err := reconcile.New(reconcile.Config{Source: &sliceSource{}, Store: store, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	rep, failed := rc.Apply(context.Background(), changes)
	// Changes go in chunks of 100: the chunk holding 130 fails, so from
	// its first change (100) on everything is delivered again.
	if len(failed) != 150 || failed[0] != "100" || failed[149] != "249" {
		t.Fatalf("failed %d ids from %v", len(failed), failed[:1])
	}
	if rep.Settled != 100 {
		t.Fatalf("settled %d before the failure, want 100", rep.Settled)
	}
	// Delivered again, with the poison gone: the first 100 are duplicates.
	store.poison = ""
	rep, failed = rc.Apply(context.Background(), changes)
	if len(failed) != 0 || rep.Settled != 150 || rep.Duplicates != 100 {
		t.Fatalf("redelivery: %+v failed %d", rep, len(failed))
	}
}

func TestRunCommitsEachBatchAndResumes(t *testing.T) {
	src := &sliceSource{batches: [][]reconcile.Change{
		{completed("1", 100, 80), completed("2", 100, 100)},
		{completed("3", 50, 70)},
	}}
	store := memstore.New()
	rc, _ := reconcile.New(reconcile.Config{Source: src, Store: store, Now: func() time.Time { return t0.Add(2 * time.Second) }})
	src.failNext = true
	if _, err := rc.Run(context.Background()); err == nil {
		t.Fatal("a failed commit must fail the run")
	}
	rep, err := rc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Batch 1 again (its first settlement a duplicate, its second had
	// nothing to correct), then batch 2.
	if rep.Read != 3 || rep.Settled != 1 || rep.Duplicates != 1 || src.committed != 2 {
		t.Fatalf("resumed run %+v, committed %d", rep, src.committed)
	}
	if rep.Lag != 2*time.Second {
		t.Fatalf("lag %v, want 2s", rep.Lag)
	}
	e := rep.Routes["chat"]
	if e == nil || e.Requests != 3 || e.Reserved != 250 || e.Used != 250 {
		t.Fatalf("estimate error %+v", e)
	}
}

func TestRunStopsBeforeItsDeadline(t *testing.T) {
	// Each batch takes 10 s. With a 24 s budget the run reads batches at
	// +0 and +10, and at +20 stops: the margin (5 s, or a fifth of the
	// budget, 4.8 s) would overrun the deadline.
	start := time.Now()
	now := start
	src := &sliceSource{batches: [][]reconcile.Change{{completed("1", 10, 5)}, {completed("2", 10, 5)}, {completed("3", 10, 5)}},
		onNext: func() { now = now.Add(10 * time.Second) }}
	rc, _ := reconcile.New(reconcile.Config{Source: src, Store: memstore.New(), Margin: 5 * time.Second,
		Now: func() time.Time { return now }})
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(24*time.Second))
	defer cancel()
	rep, err := rc.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Stopped || src.committed != 2 {
		t.Fatalf("run %+v committed %d, want it to stop after two batches", rep, src.committed)
	}
}

// A run whose whole budget is shorter than the margin still reads: the
// local loop gives each run one interval (5 s by default), the margin's
// default.
func TestShortBudgetStillReads(t *testing.T) {
	src := &sliceSource{batches: [][]reconcile.Change{{completed("1", 10, 5)}, {completed("2", 10, 5)}}}
	rc, _ := reconcile.New(reconcile.Config{Source: src, Store: memstore.New()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := rc.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stopped || src.committed != 2 || rep.Settled != 2 {
		t.Fatalf("run with a 5 s budget: %+v, committed %d; want both batches settled", rep, src.committed)
	}
}

// Reservations that learn learn from what was settled now: a batch read
// again after its checkpoint failed is settled once, and learned from
// once.
func TestLearnsOnlyWhatItSettled(t *testing.T) {
	src := &sliceSource{batches: [][]reconcile.Change{{completed("1", 100, 80), completed("2", 100, 60)}}}
	var learned []reconcile.Observation
	rc, _ := reconcile.New(reconcile.Config{Source: src, Store: memstore.New(), Now: func() time.Time { return t0 },
		Learn: func(_ context.Context, obs []reconcile.Observation) { learned = append(learned, obs...) }})
	src.failNext = true
	if _, err := rc.Run(context.Background()); err == nil {
		t.Fatal("a failed commit must fail the run")
	}
	if _, err := rc.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(learned) != 2 || learned[0].OutputTokens+learned[1].OutputTokens != 140 {
		t.Fatalf("learned %+v from a batch read twice, want each of its two requests once", learned)
	}
}
