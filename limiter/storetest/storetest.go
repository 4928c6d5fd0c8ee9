// Package storetest is the behaviour suite every limiter.Store runs: the
// embedded store and the DynamoDB store pass the very same scenarios.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Opener opens a store on a backend shared by every store it opens: each
// call is a separate client, as separate Lambda environments would have.
type Opener func() limiter.Store

// NewBackend returns an Opener on a fresh, empty backend for one test.
type NewBackend func(t *testing.T) Opener

// T0 is the suite's first instant: a Unix day boundary, so it starts a
// minute, an hour and a day window at once.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs the suite.
func Run(t *testing.T, newBackend NewBackend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"AdmitsUpToLimit", testAdmitsUpToLimit},
		{"AllOrNothing", testAllOrNothing},
		{"SlidingPrevious", testSlidingPrevious},
		{"CountersAreSeparate", testCountersAreSeparate},
		{"InFlightReleasedOnComplete", testInFlightReleasedOnComplete},
		{"ExpiredLeaseStopsCounting", testExpiredLeaseStopsCounting},
		{"SettleExactlyOnce", testSettleExactlyOnce},
		{"SettleNeverRefundsInexact", testSettleNeverRefundsInexact},
		{"ReadChangesNothing", testReadChangesNothing},
		{"HammerOneRule", testHammerOneRule},
		{"HammerThreeRules", testHammerThreeRules},
		{"HammerInFlight", testHammerInFlight},
		{"RefusesBadAmounts", testRefusesBadAmounts},
		{"RenewKeepsSlot", testRenewKeepsSlot},
		{"SplitChargeSettledPerPart", testSplitChargeSettledPerPart},
		{"CountersNeverBelowZero", testCountersNeverBelowZero},
		{"HammerAdmitComplete", testHammerAdmitComplete},
		{"BudgetReservesAndSettles", testBudgetReservesAndSettles},
		{"HammerBudget", testHammerBudget},
		{"BucketBurstThenRate", testBucketBurstThenRate},
		{"BucketSettled", testBucketSettled},
		{"FixedWindow", testFixedWindow},
		{"ShadowNeverRefuses", testShadowNeverRefuses},
		{"ExplainChargesNothing", testExplainChargesNothing},
		{"BillExactlyOnce", testBillExactlyOnce},
		{"FairShare", testFairShare},
		{"FairShareInFlight", testFairShareInFlight},
		{"BedrockQuota", testBedrockQuota},
		{"UpstreamReportsAtMostEvery", testUpstreamReportsAtMostEvery},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newBackend(t))
		})
	}
}

func window(rule string, kind limiter.Kind, period time.Duration, limit, amount int64, now time.Time) limiter.Charge {
	return limiter.Charge{
		Counter: limiter.Counter{Rule: rule, Kind: kind, Window: now.UnixNano() / int64(period)},
		Period:  period,
		Limit:   limit,
		Amount:  amount,
	}
}

func gauge(rule string, limit int64) limiter.Charge {
	return limiter.Charge{
		Counter: limiter.Counter{Rule: rule, Kind: limiter.KindInFlight},
		Period:  limiter.Concurrent,
		Limit:   limit,
		Amount:  1,
	}
}

// charge charges cs as the limiter does: a refusal after which the store
// reclaimed slots is charged once more, under a new lease.
func charge(t *testing.T, s limiter.Store, now time.Time, l *limiter.Lease, cs ...limiter.Charge) limiter.Outcome {
	t.Helper()
	out, err := s.Charge(context.Background(), now, cs, l)
	if err == nil && !out.Admitted && out.Reclaimed && l != nil {
		again := *l
		again.ID += "~r"
		out, err = s.Charge(context.Background(), now, cs, &again)
	}
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if len(out.States) != len(cs) {
		t.Fatalf("Charge returned %d states for %d charges", len(out.States), len(cs))
	}
	return out
}

func read(t *testing.T, s limiter.Store, now time.Time, cs ...limiter.Charge) []limiter.State {
	t.Helper()
	st, err := s.Read(context.Background(), now, cs)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return st
}

var leaseSeq atomic.Int64

func newLease(now time.Time, ttl time.Duration, cs ...limiter.Charge) *limiter.Lease {
	return &limiter.Lease{
		ID:         fmt.Sprintf("l%x-%d", now.UnixNano(), leaseSeq.Add(1)),
		AdmittedAt: now,
		ExpiresAt:  now.Add(ttl),
		UserPath:   "/suite",
		Route:      "chat",
		Charges:    cs,
	}
}

func testAdmitsUpToLimit(t *testing.T, open Opener) {
	s := open()
	now := T0.Add(10 * time.Second)
	c := window("admits", limiter.KindRequests, time.Minute, 3, 1, now)
	for i := int64(1); i <= 3; i++ {
		out := charge(t, s, now, nil, c)
		if !out.Admitted || out.States[0].Cur != i {
			t.Fatalf("charge %d: admitted=%v cur=%d, want admitted with cur %d", i, out.Admitted, out.States[0].Cur, i)
		}
	}
	out := charge(t, s, now, nil, c)
	if out.Admitted || !out.States[0].Refused || out.States[0].Cur != 3 {
		t.Fatalf("4th charge: %+v, want refused with cur 3", out)
	}
	// A charge of several units that does not fit is refused even when one
	// unit would.
	tok := window("admits-tok", limiter.KindTokens, time.Minute, 100, 60, now)
	if out := charge(t, s, now, nil, tok); !out.Admitted {
		t.Fatal("first 60 of 100 tokens refused")
	}
	if out := charge(t, s, now, nil, tok); out.Admitted || out.States[0].Cur != 60 {
		t.Fatalf("second 60 of 100 tokens: %+v, want refused with cur 60", out)
	}
}

func testAllOrNothing(t *testing.T, open Opener) {
	s := open()
	now := T0.Add(5 * time.Second)
	a := window("aon-a", limiter.KindRequests, time.Minute, 10, 1, now)
	b := window("aon-b", limiter.KindTokens, time.Minute, 100, 80, now)
	g := gauge("aon-g", 5)
	if out := charge(t, s, now, newLease(now, time.Minute, a, b, g), a, b, g); !out.Admitted {
		t.Fatalf("first charge refused: %+v", out)
	}
	out := charge(t, s, now, newLease(now, time.Minute, a, b, g), a, b, g)
	if out.Admitted {
		t.Fatal("second charge admitted past the token limit")
	}
	if out.States[0].Refused || !out.States[1].Refused || out.States[2].Refused {
		t.Fatalf("refused marks %v %v %v, want only the token charge refused",
			out.States[0].Refused, out.States[1].Refused, out.States[2].Refused)
	}
	want := []int64{1, 80, 1}
	for i, st := range out.States {
		if st.Cur != want[i] {
			t.Errorf("refused outcome state %d: cur %d, want %d (without this request)", i, st.Cur, want[i])
		}
	}
	for i, st := range read(t, s, now, a, b, g) {
		if st.Cur != want[i] {
			t.Errorf("after refusal, counter %d holds %d, want %d", i, st.Cur, want[i])
		}
	}
}

func testSlidingPrevious(t *testing.T, open Opener) {
	s := open()
	w0 := T0.Add(30 * time.Second)
	c := window("slide", limiter.KindRequests, time.Minute, 10, 1, w0)
	for range 10 {
		if out := charge(t, s, w0, nil, c); !out.Admitted {
			t.Fatal("window 0 refused before its limit")
		}
	}
	// 15 s into the next window the previous 10 weigh 10·45/60 = 7.5, so 2
	// more fit (7.5+2 ≤ 10) and a third does not (7.5+3 > 10).
	w1 := T0.Add(75 * time.Second)
	c1 := window("slide", limiter.KindRequests, time.Minute, 10, 1, w1)
	for i := range 3 {
		out := charge(t, s, w1, nil, c1)
		if out.States[0].Prev != 10 {
			t.Fatalf("prev = %d, want 10", out.States[0].Prev)
		}
		if got, want := out.Admitted, i < 2; got != want {
			t.Fatalf("charge %d in window 1: admitted=%v, want %v", i, got, want)
		}
	}
	// 30 s in, prev weighs 5: 3 more fit in total (5+5 ≤ 10).
	w1b := T0.Add(90 * time.Second)
	c1b := window("slide", limiter.KindRequests, time.Minute, 10, 1, w1b)
	admitted := 0
	for range 5 {
		if charge(t, s, w1b, nil, c1b).Admitted {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("30 s into window 1: %d admitted, want 3", admitted)
	}
}

func testCountersAreSeparate(t *testing.T, open Opener) {
	s := open()
	now := T0.Add(time.Second)
	base := window("sep", limiter.KindRequests, time.Minute, 1, 1, now)
	variants := []limiter.Charge{base, base, base, base, base}
	variants[1].Counter.Child = "alice"
	variants[2].Counter.Shard = 1
	variants[3].Counter.Kind = limiter.KindTokens
	variants[4].Counter.Rule = "sep-other"
	for i, c := range variants {
		if out := charge(t, s, now, nil, c); !out.Admitted {
			t.Fatalf("variant %d shares a counter with another: %+v", i, out)
		}
	}
	// The next window of the same counter starts at zero.
	later := now.Add(2 * time.Minute)
	if out := charge(t, s, later, nil, window("sep", limiter.KindRequests, time.Minute, 1, 1, later)); !out.Admitted {
		t.Fatal("two windows later the counter is still full")
	}
}

func testInFlightReleasedOnComplete(t *testing.T, open Opener) {
	s := open()
	ctx := context.Background()
	now := T0
	g := gauge("fly", 2)
	l1, l2 := newLease(now, time.Hour, g), newLease(now, time.Hour, g)
	charge(t, s, now, l1, g)
	charge(t, s, now, l2, g)
	if out := charge(t, s, now, newLease(now, time.Hour, g), g); out.Admitted || out.States[0].Cur != 2 {
		t.Fatalf("third in-flight admitted past limit 2: %+v", out)
	}
	if err := s.Complete(ctx, now, l1, limiter.Usage{Exact: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, now, l1, limiter.Usage{Exact: true}); err != nil {
		t.Fatalf("second Complete: %v", err)
	}
	if st := read(t, s, now, g); st[0].Cur != 1 {
		t.Fatalf("after completing one lease twice, %d in flight, want 1", st[0].Cur)
	}
	if err := s.Complete(ctx, now, newLease(now, time.Hour, g), limiter.Usage{}); err != nil {
		t.Fatalf("Complete of an unknown lease: %v", err)
	}
}

func testExpiredLeaseStopsCounting(t *testing.T, open Opener) {
	s := open()
	ctx := context.Background()
	now := T0
	g := gauge("expire", 1)
	dead := newLease(now, time.Minute, g)
	charge(t, s, now, dead, g)
	// Until its expiry the dead request holds the only slot.
	before := now.Add(time.Minute - time.Millisecond)
	if out := charge(t, s, before, newLease(before, time.Minute, g), g); out.Admitted {
		t.Fatal("slot admitted before the lease expired")
	}
	// From its expiry it does not, with no TTL deletion involved.
	at := now.Add(time.Minute)
	next := newLease(at, time.Minute, g)
	if out := charge(t, s, at, next, g); !out.Admitted {
		t.Fatalf("slot still held after the lease expired: %+v", out)
	}
	// Completing the expired lease late releases nothing more.
	if err := s.Complete(ctx, at, dead, limiter.Usage{Exact: true}); err != nil {
		t.Fatal(err)
	}
	if st := read(t, s, at, g); st[0].Cur != 1 {
		t.Fatalf("late completion of an expired lease changed the gauge to %d, want 1", st[0].Cur)
	}
}

func testSettleExactlyOnce(t *testing.T, open Opener) {
	s := open()
	ctx := context.Background()
	now := T0.Add(time.Second)
	tok := window("settle-tok", limiter.KindTokens, time.Minute, 1000, 150, now)
	in := window("settle-in", limiter.KindInputTokens, time.Minute, 1000, 50, now)
	out := window("settle-out", limiter.KindOutputTokens, time.Minute, 1000, 100, now)
	req := window("settle-req", limiter.KindRequests, time.Minute, 1000, 1, now)
	l := newLease(now, time.Hour, tok, in, out, req)
	l.Reserved = limiter.Usage{InputTokens: 50, OutputTokens: 100}
	charge(t, s, now, l, tok, in, out, req)
	if err := s.Complete(ctx, now, l, limiter.Usage{InputTokens: 70, OutputTokens: 20, Exact: true}); err != nil {
		t.Fatal(err)
	}
	st := limiter.Settlement{Lease: l, Used: limiter.Usage{InputTokens: 70, OutputTokens: 20, Exact: true}}
	for pass := range 3 {
		applied, err := s.Settle(ctx, []limiter.Settlement{st})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 0}[pass == 0]; applied != want {
			t.Fatalf("pass %d: Settle applied %d, want %d", pass, applied, want)
		}
		got := read(t, s, now, tok, in, out, req)
		want := []int64{90, 70, 20, 1}
		for i := range want {
			if got[i].Cur != want[i] {
				t.Fatalf("pass %d: counter %d = %d, want %d", pass, i, got[i].Cur, want[i])
			}
		}
	}
}

func testSettleNeverRefundsInexact(t *testing.T, open Opener) {
	s := open()
	ctx := context.Background()
	now := T0.Add(time.Second)
	in := window("inexact-in", limiter.KindInputTokens, time.Minute, 100, 50, now)
	out := window("inexact-out", limiter.KindOutputTokens, time.Minute, 100, 100, now)
	l := newLease(now, time.Hour, in, out)
	l.Reserved = limiter.Usage{InputTokens: 50, OutputTokens: 100}
	charge(t, s, now, l, in, out)
	// The stream broke: output is short (no refund), input overshot (charged
	// even past the limit).
	used := limiter.Usage{InputTokens: 130, OutputTokens: 10, Exact: false}
	if _, err := s.Settle(ctx, []limiter.Settlement{{Lease: l, Used: used}}); err != nil {
		t.Fatal(err)
	}
	got := read(t, s, now, in, out)
	if got[0].Cur != 130 || got[1].Cur != 100 {
		t.Fatalf("after inexact settlement in=%d out=%d, want 130 and 100", got[0].Cur, got[1].Cur)
	}
}

func testReadChangesNothing(t *testing.T, open Opener) {
	s := open()
	now := T0
	c := window("read", limiter.KindRequests, time.Minute, 5, 1, now)
	charge(t, s, now, nil, c)
	for range 3 {
		if st := read(t, s, now, c); st[0].Cur != 1 || st[0].Refused {
			t.Fatalf("read %+v, want cur 1", st[0])
		}
	}
	empty := window("read-empty", limiter.KindTokens, time.Hour, 5, 1, now)
	if st := read(t, s, now, empty); st[0].Cur != 0 || st[0].Prev != 0 {
		t.Fatalf("read of an unknown counter: %+v", st[0])
	}
}

// hammer runs workers goroutines, each on its own store client, making
// perWorker charges each; it returns how many were admitted.
func hammer(t *testing.T, open Opener, workers, perWorker int, fn func(s limiter.Store, i int) (bool, error)) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		s := open()
		wg.Go(func() {
			for i := range perWorker {
				ok, err := fn(s, w*perWorker+i)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
	return int(admitted.Load())
}

const (
	workers   = 16
	perWorker = 12
)

func testHammerOneRule(t *testing.T, open Opener) {
	now := T0.Add(3 * time.Second)
	c := window("hammer1", limiter.KindRequests, time.Minute, 50, 1, now)
	n := hammer(t, open, workers, perWorker, func(s limiter.Store, _ int) (bool, error) {
		out, err := s.Charge(context.Background(), now, []limiter.Charge{c}, nil)
		return out.Admitted, err
	})
	if n != 50 {
		t.Fatalf("%d admitted of %d attempts, want exactly 50", n, workers*perWorker)
	}
	if st := read(t, open(), now, c); st[0].Cur != 50 {
		t.Fatalf("counter holds %d, want 50", st[0].Cur)
	}
}

func testHammerThreeRules(t *testing.T, open Opener) {
	now := T0.Add(3 * time.Second)
	cs := []limiter.Charge{
		window("hammer3-user", limiter.KindRequests, time.Minute, 70, 1, now),
		window("hammer3-provider", limiter.KindTokens, time.Minute, 40*25, 25, now),
		window("hammer3-model", limiter.KindRequests, time.Hour, 90, 1, now),
	}
	n := hammer(t, open, workers, perWorker, func(s limiter.Store, _ int) (bool, error) {
		out, err := s.Charge(context.Background(), now, cs, nil)
		return out.Admitted, err
	})
	if n != 40 {
		t.Fatalf("%d admitted, want exactly 40 (the token rule's 1000/25)", n)
	}
	// No rule holds a charge for a refused request.
	for i, st := range read(t, open(), now, cs...) {
		if want := int64(n) * cs[i].Amount; st.Cur != want {
			t.Errorf("rule %d holds %d, want %d", i, st.Cur, want)
		}
	}
}

func testHammerInFlight(t *testing.T, open Opener) {
	now := T0
	g := gauge("hammer-fly", 7)
	req := window("hammer-fly-req", limiter.KindRequests, time.Minute, 1000, 1, now)
	n := hammer(t, open, workers, 4, func(s limiter.Store, _ int) (bool, error) {
		l := newLease(now, time.Hour, g, req)
		out, err := s.Charge(context.Background(), now, []limiter.Charge{g, req}, l)
		return out.Admitted, err
	})
	if n != 7 {
		t.Fatalf("%d in flight admitted, want exactly 7", n)
	}
	st := read(t, open(), now, g, req)
	if st[0].Cur != 7 || st[1].Cur != 7 {
		t.Fatalf("gauge %d, request counter %d; want 7 and 7", st[0].Cur, st[1].Cur)
	}
}

func testRefusesBadAmounts(t *testing.T, open Opener) {
	s := open()
	now := T0
	for _, amount := range []int64{-1, -1 << 62, limiter.MaxAmount + 1, 1<<63 - 1} {
		c := window("bad-amount", limiter.KindTokens, time.Minute, 1000, amount, now)
		_, err := s.Charge(context.Background(), now, []limiter.Charge{c}, nil)
		if !errors.Is(err, limiter.ErrInvalidAmount) {
			t.Fatalf("a charge of %d: %v, want ErrInvalidAmount", amount, err)
		}
	}
	if st := read(t, s, now, window("bad-amount", limiter.KindTokens, time.Minute, 1000, 1, now)); st[0].Cur != 0 {
		t.Fatalf("a refused bad charge left %d on the counter", st[0].Cur)
	}
	g := gauge("bad-lease", 1)
	long := newLease(now, time.Minute, g)
	long.ID = strings.Repeat("x", limiter.MaxLeaseIDLen+1)
	if _, err := s.Charge(context.Background(), now, []limiter.Charge{g}, long); !errors.Is(err, limiter.ErrInvalidLease) {
		t.Fatalf("a lease id of %d bytes: %v, want ErrInvalidLease", len(long.ID), err)
	}
}

func testRenewKeepsSlot(t *testing.T, open Opener) {
	s := open()
	ctx := context.Background()
	now := T0
	g := gauge("renew", 1)
	l := newLease(now, time.Minute, g)
	charge(t, s, now, l, g)
	// Renewed at 40 s for another minute, the slot is held past the first
	// expiry.
	ok, err := s.Renew(ctx, now.Add(40*time.Second), l, now.Add(100*time.Second))
	if err != nil || !ok {
		t.Fatalf("Renew of an active lease: %v, %v", ok, err)
	}
	at := now.Add(90 * time.Second)
	if out := charge(t, s, at, newLease(at, time.Minute, g), g); out.Admitted {
		t.Fatal("a renewed lease lost its slot at its first expiry")
	}
	// Past the renewed expiry it is gone, and renewing it fails.
	after := now.Add(100 * time.Second)
	if ok, err := s.Renew(ctx, after, l, after.Add(time.Minute)); err != nil || ok {
		t.Fatalf("Renew of an expired lease: %v, %v; want false", ok, err)
	}
	if out := charge(t, s, after, newLease(after, time.Minute, g), g); !out.Admitted {
		t.Fatal("the slot is still held after the renewed lease expired")
	}
	// A completed lease cannot be renewed.
	done := newLease(after, time.Minute, gauge("renew-done", 1))
	charge(t, s, after, done, done.Charges...)
	if err := s.Complete(ctx, after, done, limiter.Usage{Exact: true}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Renew(ctx, after, done, after.Add(time.Minute)); err != nil || ok {
		t.Fatalf("Renew of a completed lease: %v, %v; want false", ok, err)
	}
}

func testSplitChargeSettledPerPart(t *testing.T, open Opener) {
	s := open()
	ctx := context.Background()
	now := T0.Add(time.Second)
	a := window("split", limiter.KindTokens, time.Minute, 100, 60, now)
	b := a
	b.Counter.Shard, b.Amount = 1, 40
	l := newLease(now, time.Hour, a, b)
	l.Reserved = limiter.Usage{InputTokens: 100}
	charge(t, s, now, l, a, b)
	// 10 used of 100 reserved: the refund of 90 takes 60 from the first
	// part and 30 from the second, never more than a part charged.
	if _, err := s.Settle(ctx, []limiter.Settlement{{Lease: l, Used: limiter.Usage{InputTokens: 10, Exact: true}}}); err != nil {
		t.Fatal(err)
	}
	got := read(t, s, now, a, b)
	if got[0].Cur != 0 || got[1].Cur != 10 {
		t.Fatalf("after settling a split charge the parts hold %d and %d, want 0 and 10", got[0].Cur, got[1].Cur)
	}
}

func testCountersNeverBelowZero(t *testing.T, open Opener) {
	s := open()
	ctx := context.Background()
	now := T0
	g := gauge("floor", 3)
	l := newLease(now, time.Hour, g)
	charge(t, s, now, l, g)
	for range 3 {
		if err := s.Complete(ctx, now, l, limiter.Usage{Exact: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Completing leases the store never admitted releases nothing.
	for range 3 {
		if err := s.Complete(ctx, now, newLease(now, time.Hour, g), limiter.Usage{Exact: true}); err != nil {
			t.Fatal(err)
		}
	}
	if st := read(t, s, now, g); st[0].Cur != 0 {
		t.Fatalf("gauge at %d after one admission and its repeated completion, want 0", st[0].Cur)
	}
	// Three fit again: nothing was released twice into negative room.
	n := 0
	for range 5 {
		if charge(t, s, now, newLease(now, time.Hour, g), g).Admitted {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d admitted on a gauge of 3 after the releases, want 3", n)
	}
	// A settlement refund never takes a window below zero.
	tok := window("floor-tok", limiter.KindTokens, time.Minute, 1000, 50, now)
	tl := newLease(now, time.Hour, tok)
	tl.Reserved = limiter.Usage{InputTokens: 50}
	charge(t, s, now, tl, tok)
	if _, err := s.Settle(ctx, []limiter.Settlement{{Lease: tl, Used: limiter.Usage{Exact: true}}}); err != nil {
		t.Fatal(err)
	}
	if st := read(t, s, now, tok); st[0].Cur != 0 {
		t.Fatalf("token window at %d after a full refund, want 0", st[0].Cur)
	}
	// Refunds worth more than the counter holds (a lease it never charged,
	// as a counter changed by hand would leave) take it to zero, not
	// below, and every settlement is applied: both stores agree.
	a := newLease(now, time.Hour, tok)
	a.Reserved = limiter.Usage{InputTokens: 50}
	charge(t, s, now, a, tok)
	ghost := newLease(now, time.Hour, tok)
	ghost.Reserved = limiter.Usage{InputTokens: 50}
	n, err := s.Settle(ctx, []limiter.Settlement{{Lease: a, Used: limiter.Usage{Exact: true}}, {Lease: ghost, Used: limiter.Usage{Exact: true}}})
	if err != nil || n != 2 {
		t.Fatalf("settled %d of 2 refunds past zero: %v", n, err)
	}
	if st := read(t, s, now, tok); st[0].Cur != 0 {
		t.Fatalf("token window at %d after refunds worth more than it held, want 0", st[0].Cur)
	}
}

// testHammerAdmitComplete admits and completes on a small gauge from many
// clients at once: the gauge never holds more than its limit and ends at
// zero, whatever interleaving of acquisitions and releases happened.
func testHammerAdmitComplete(t *testing.T, open Opener) {
	now := T0
	g := gauge("hammer-cycle", 3)
	var peak, inFlight atomic.Int64
	n := hammer(t, open, 8, 6, func(s limiter.Store, _ int) (bool, error) {
		l := newLease(now, time.Hour, g)
		out, err := s.Charge(context.Background(), now, []limiter.Charge{g}, l)
		if err != nil || !out.Admitted {
			return false, err
		}
		cur := inFlight.Add(1)
		for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
		}
		inFlight.Add(-1)
		return true, s.Complete(context.Background(), now, l, limiter.Usage{Exact: true})
	})
	if peak.Load() > 3 {
		t.Fatalf("%d in flight at once on a gauge of 3", peak.Load())
	}
	if n == 0 {
		t.Fatal("nothing admitted")
	}
	if st := read(t, open(), now, g); st[0].Cur != 0 {
		t.Fatalf("gauge at %d after every admitted lease completed, want 0", st[0].Cur)
	}
}
