package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/storetest"
)

// Writes whose answer is lost: applied by the engine, then the connection
// resets (or a 500 comes back). None may count twice or give back twice.

func lostStore(t *testing.T) (*dynamostore.Store, *faults, string) {
	t.Helper()
	prefix := dynamotest.Prefix(t)
	f := newFaults()
	return faultyStore(t, prefix, f), f, prefix
}

func minute(rule string, kind limiter.Kind, now time.Time, limit, amount int64) limiter.Charge {
	return limiter.Charge{
		Counter: limiter.Counter{Rule: rule, Kind: kind, Window: now.UnixNano() / int64(time.Minute)},
		Period:  time.Minute, Limit: limit, Amount: amount,
	}
}

func slot(rule string, limit int64) limiter.Charge {
	return limiter.Charge{Counter: limiter.Counter{Rule: rule, Kind: limiter.KindInFlight}, Limit: limit, Amount: 1}
}

var leaseN int

func lease(now time.Time, cs ...limiter.Charge) *limiter.Lease {
	leaseN++
	return &limiter.Lease{ID: fmt.Sprintf("lost-%d-%d", now.Unix(), leaseN), AdmittedAt: now, ExpiresAt: now.Add(time.Minute), Charges: cs}
}

func cur(t *testing.T, s *dynamostore.Store, now time.Time, cs ...limiter.Charge) []int64 {
	t.Helper()
	st, err := s.Read(context.Background(), now, cs)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(st))
	for i := range st {
		out[i] = st[i].Cur
	}
	return out
}

// A window ADD that applied and lost its answer is not resent (it would
// count twice): its writer token shows it landed, and the admission goes
// on. The same for one answered with a 500 after applying.
func TestLostWindowAnswerCountsOnce(t *testing.T) {
	for _, mode := range []string{lose, apply500} {
		t.Run(mode, func(t *testing.T) {
			s, f, _ := lostStore(t)
			now := storetest.T0.Add(10 * time.Second)
			c := minute("lost-window-"+mode, limiter.KindRequests, now, 5, 1)
			f.inject("UpdateItem", 1, mode, "lost-window")
			out, err := s.Charge(context.Background(), now, []limiter.Charge{c}, nil)
			if err != nil || !out.Admitted {
				t.Fatalf("charge whose answer was lost: %+v, %v; want admitted", out, err)
			}
			if got := cur(t, s, now, c); got[0] != 1 {
				t.Fatalf("counter holds %d after one charge whose answer was lost, want 1", got[0])
			}
			if f.count(f.calls, "UpdateItem") != 1 {
				t.Fatalf("the ADD reached the engine %d times, want once", f.count(f.calls, "UpdateItem"))
			}
		})
	}
}

// When the landing cannot be verified either, the charge is kept (over
// counted by at most itself, the safe side) and the admission fails: it is
// never counted twice and never refunded on a guess.
func TestUnverifiableChargeKeptNotDoubled(t *testing.T) {
	s, f, _ := lostStore(t)
	now := storetest.T0.Add(10 * time.Second)
	c := minute("unverifiable", limiter.KindRequests, now, 5, 1)
	s.Read(context.Background(), now, []limiter.Charge{c}) // prev cached: the verify is the only read
	if _, err := s.Charge(context.Background(), now, []limiter.Charge{c}, nil); err != nil {
		t.Fatal(err)
	}
	f.inject("UpdateItem", 1, lose, "unverifiable")
	f.inject("BatchGetItem", 4, drop, "unverifiable") // every attempt of the verifying read
	_, err := s.Charge(context.Background(), now, []limiter.Charge{c}, nil)
	if !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("unverifiable charge: %v, want ErrStoreUnavailable", err)
	}
	if got := cur(t, s, now, c); got[0] != 2 {
		t.Fatalf("counter holds %d, want 2 (the first charge and the kept one)", got[0])
	}
}

// A slot taken twice by a resent write is one slot: the resend finds its
// own entry.
func TestLostSlotAnswerTakesOneSlot(t *testing.T) {
	s, f, _ := lostStore(t)
	now := storetest.T0
	g := slot("lost-slot", 1)
	f.inject("UpdateItem", 1, lose, "lost-slot")
	l := lease(now, g)
	out, err := s.Charge(context.Background(), now, []limiter.Charge{g}, l)
	if err != nil || !out.Admitted {
		t.Fatalf("slot whose answer was lost: %+v, %v", out, err)
	}
	if got := cur(t, s, now, g); got[0] != 1 {
		t.Fatalf("gauge %d, want 1", got[0])
	}
	if err := s.Complete(context.Background(), now, l, limiter.Usage{Exact: true}); err != nil {
		t.Fatal(err)
	}
	if got := cur(t, s, now, g); got[0] != 0 {
		t.Fatalf("gauge %d after completion, want 0", got[0])
	}
}

// A completion record whose write applied and lost its answer is written
// once: resent, by the SDK or by the caller's repeated Complete, its
// condition finds the record it wrote. So the stream carries one record
// of the lease and the reconciler settles it once (TestReconcileExactlyOnce).
func TestLostCompletionAnswerRecordedOnce(t *testing.T) {
	ctx := context.Background()
	t.Run("resent", func(t *testing.T) {
		s, f, _ := lostStore(t)
		now := storetest.T0
		g := slot("record-resent", 1)
		l := lease(now, g)
		if out, err := s.Charge(ctx, now, []limiter.Charge{g}, l); err != nil || !out.Admitted {
			t.Fatal(out, err)
		}
		f.inject("PutItem", 1, lose, "")
		if err := s.Complete(ctx, now, l, limiter.Usage{InputTokens: 7, Exact: true}); err != nil {
			t.Fatalf("completion whose record's answer was lost once: %v", err)
		}
		if f.count(f.calls, "PutItem") != 2 {
			t.Fatalf("the record was sent %d times, want twice (the lost one and its resend)", f.count(f.calls, "PutItem"))
		}
		if rec := leaseRecord(t, s, l.ID); rec.Status != dynamostore.StatusCompleted || rec.Used.InputTokens != 7 || !rec.Released {
			t.Fatalf("record %+v, want completed, released, with its usage", rec)
		}
		if got := cur(t, s, now, g); got[0] != 0 {
			t.Fatalf("gauge %d, want 0", got[0])
		}
	})
	t.Run("every answer lost", func(t *testing.T) {
		s, f, _ := lostStore(t)
		now := storetest.T0
		g := slot("record-lost", 1)
		l := lease(now, g)
		if out, err := s.Charge(ctx, now, []limiter.Charge{g}, l); err != nil || !out.Admitted {
			t.Fatal(out, err)
		}
		f.inject("PutItem", 4, lose, "") // every attempt
		if err := s.Complete(ctx, now, l, limiter.Usage{Exact: true}); !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Fatalf("completion whose every answer was lost: %v, want ErrStoreUnavailable", err)
		}
		// The caller retries; the record that landed is recognised, and
		// the slot, given back the first time, is not given back twice.
		b := lease(now, g)
		if out, err := s.Charge(ctx, now, []limiter.Charge{g}, b); err != nil || !out.Admitted {
			t.Fatalf("the next request: %+v, %v", out, err)
		}
		if err := s.Complete(ctx, now, l, limiter.Usage{Exact: true}); err != nil {
			t.Fatalf("the retried completion: %v", err)
		}
		if got := cur(t, s, now, g); got[0] != 1 {
			t.Fatalf("gauge %d after the retried completion, want 1: b's slot is b's", got[0])
		}
		if out, err := s.Charge(ctx, now, []limiter.Charge{g}, lease(now, g)); err != nil || out.Admitted {
			t.Fatalf("a second request in flight on concurrent=1: %+v, %v", out, err)
		}
	})
}

// A renewal whose answer was lost leaves the lease one more entry, with an
// expiry its caller never learnt: the next renewal and the completion take
// every entry of the lease away, so the slot is held once and given back
// whole.
func TestLostRenewalAnswerHoldsOneSlot(t *testing.T) {
	s, f, _ := lostStore(t)
	ctx := context.Background()
	now := storetest.T0
	g := slot("renew-lost", 2)
	l := lease(now, g) // expires at +1 min
	if out, err := s.Charge(ctx, now, []limiter.Charge{g}, l); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	f.inject("UpdateItem", 4, lose, "contains(#b, :old)") // every attempt applies, no answer
	if ok, err := s.Renew(ctx, now.Add(20*time.Second), l, now.Add(80*time.Second)); err == nil {
		t.Fatalf("renewal whose every answer was lost: %v, %v; want an error", ok, err)
	}
	if got := cur(t, s, now.Add(30*time.Second), g); got[0] != 2 {
		t.Fatalf("gauge %d after the lost renewal, want 2 (the lease counted twice, the safe side)", got[0])
	}
	// The caller still knows the first expiry, and renews again.
	if ok, err := s.Renew(ctx, now.Add(40*time.Second), l, now.Add(100*time.Second)); err != nil || !ok {
		t.Fatalf("the next renewal: %v, %v", ok, err)
	}
	l.ExpiresAt = now.Add(100 * time.Second)
	if got := cur(t, s, now.Add(90*time.Second), g); got[0] != 1 {
		t.Fatalf("gauge %d past the first expiry, want the renewed lease's one slot", got[0])
	}
	if err := s.Complete(ctx, now.Add(90*time.Second), l, limiter.Usage{Exact: true}); err != nil {
		t.Fatal(err)
	}
	if got := cur(t, s, now.Add(90*time.Second), g); got[0] != 0 {
		t.Fatalf("gauge %d after completion, want 0", got[0])
	}
}

// A compensation that applied and lost its answer is not resent: resent,
// it would take the charge back twice and let the window over-admit.
func TestLostCompensationTakesBackOnce(t *testing.T) {
	s, f, _ := lostStore(t)
	ctx := context.Background()
	now := storetest.T0.Add(10 * time.Second)
	a := minute("comp-a", limiter.KindRequests, now, 5, 1)
	b := minute("comp-b", limiter.KindRequests, now, 1, 1)
	// b is full, so the next charge of both is refused and a compensated.
	if out, err := s.Charge(ctx, now, []limiter.Charge{b}, nil); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	if out, err := s.Charge(ctx, now, []limiter.Charge{a}, nil); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	f.inject("UpdateItem", 1, lose, ":a\":{\"N\":\"-1\"}")
	out, err := s.Charge(ctx, now, []limiter.Charge{a, b}, nil)
	if err != nil || out.Admitted {
		t.Fatalf("charge past b's limit: %+v, %v", out, err)
	}
	if f.count(f.hits, "UpdateItem") != 1 {
		t.Fatal("the compensation's answer was not lost: the test proves nothing")
	}
	if got := cur(t, s, now, a); got[0] != 1 {
		t.Fatalf("counter a holds %d after one admission and one compensated charge, want 1", got[0])
	}
}

// A completion whose release fails records that, and the reconciler's
// Release gives the slot back; the slot is not held until a reset.
func TestFailedReleaseRecordedAndRepaired(t *testing.T) {
	s, f, _ := lostStore(t)
	ctx := context.Background()
	now := storetest.T0
	g := slot("release-fails", 1)
	l := lease(now, g)
	if out, err := s.Charge(ctx, now, []limiter.Charge{g}, l); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	f.inject("UpdateItem", 4, drop, "DELETE #b") // every attempt
	if err := s.Complete(ctx, now, l, limiter.Usage{InputTokens: 3, Exact: true}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec := leaseRecord(t, s, l.ID)
	if rec.Status != dynamostore.StatusCompleted || rec.Released {
		t.Fatalf("lease %s released=%v, want completed and not released", rec.Status, rec.Released)
	}
	if got := cur(t, s, now, g); got[0] != 1 {
		t.Fatalf("gauge %d, want the slot still held", got[0])
	}
	if n, err := s.Release(ctx, []limiter.Lease{rec.Lease}); err != nil || n != 1 {
		t.Fatalf("Release: %d, %v", n, err)
	}
	if n, err := s.Release(ctx, []limiter.Lease{rec.Lease}); err != nil || n != 0 {
		t.Fatalf("Release again: %d, %v; want nothing left to release", n, err)
	}
	if got := cur(t, s, now, g); got[0] != 0 {
		t.Fatalf("gauge %d after the reconciler's release (twice), want 0", got[0])
	}
}

// A refused admission whose slot could not be given back (the store
// failed just then) leaves a slot nobody holds: it carries the lease's
// expiry, so it is counted until then and reclaimed by the first
// admission that finds the gauge full after it.
func TestUnreleasedSlotHeldToItsExpiry(t *testing.T) {
	s, f, _ := lostStore(t)
	ctx := context.Background()
	now := storetest.T0.Add(10 * time.Second)
	g := slot("unreleased", 1)
	full := minute("unreleased-w", limiter.KindRequests, now, 1, 1)
	if out, err := s.Charge(ctx, now, []limiter.Charge{full}, nil); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	f.inject("UpdateItem", 4, drop, "DELETE #b") // the undo's every attempt
	if out, err := s.Charge(ctx, now, []limiter.Charge{g, full}, lease(now, g, full)); err != nil || out.Admitted {
		t.Fatalf("charge past the window's limit: %+v, %v; want refused", out, err)
	}
	if got := cur(t, s, now, g); got[0] != 1 {
		t.Fatalf("gauge %d, want the slot the undo could not give back", got[0])
	}
	soon := now.Add(30 * time.Second)
	if out, err := s.Charge(ctx, soon, []limiter.Charge{g}, lease(soon, g)); err != nil || out.Admitted || out.Reclaimed {
		t.Fatalf("before its expiry: %+v, %v; want refused, nothing reclaimed", out, err)
	}
	expired := now.Add(time.Minute)
	if out, err := s.Charge(ctx, expired, []limiter.Charge{g}, lease(expired, g)); err != nil || out.Admitted || !out.Reclaimed {
		t.Fatalf("at its expiry: %+v, %v; want refused with the slot reclaimed", out, err)
	}
	if out, err := s.Charge(ctx, expired, []limiter.Charge{g}, lease(expired, g)); err != nil || !out.Admitted {
		t.Fatalf("charged again after the reclaim: %+v, %v", out, err)
	}
}

// While the engine is unreachable every admission fails closed, and when
// it is back nothing is left charged by the failures.
func TestOutageLeavesNothingCharged(t *testing.T) {
	s, f, _ := lostStore(t)
	ctx := context.Background()
	now := storetest.T0.Add(10 * time.Second)
	w := minute("outage-w", limiter.KindRequests, now, 100, 1)
	g := slot("outage-g", 2)
	s.Read(ctx, now, []limiter.Charge{w, g})
	f.down.Store(true)
	for range 3 {
		if _, err := s.Charge(ctx, now, []limiter.Charge{w, g}, lease(now, w, g)); !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Fatalf("during the outage: %v, want ErrStoreUnavailable", err)
		}
	}
	f.down.Store(false)
	if got := cur(t, s, now, w, g); got[0] != 0 || got[1] != 0 {
		t.Fatalf("after the outage the counters hold %v, want nothing", got)
	}
	for range 2 {
		if out, err := s.Charge(ctx, now, []limiter.Charge{w, g}, lease(now, w, g)); err != nil || !out.Admitted {
			t.Fatalf("after the outage: %+v, %v", out, err)
		}
	}
}

func leaseRecord(t *testing.T, s *dynamostore.Store, id string) dynamostore.LeaseRecord {
	t.Helper()
	api := dynamotest.Client(t, dynamostore.ClientOptions{})
	item, err := api.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(s.Tables().Leases), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(item.Item) == 0 {
		t.Fatalf("no lease %s", id)
	}
	rec, err := dynamostore.DecodeLease(item.Item)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
