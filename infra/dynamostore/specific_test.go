package dynamostore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/storetest"
)

func minuteCharge(rule string, now time.Time, limit, amount int64) limiter.Charge {
	return limiter.Charge{
		Counter: limiter.Counter{Rule: rule, Kind: limiter.KindRequests, Window: now.UnixNano() / int64(time.Minute)},
		Period:  time.Minute, Limit: limit, Amount: amount,
	}
}

// One admission is one round trip: the previous window's count is read
// once per window and process, then cached, since a closed request window
// never changes.
func TestOneRoundTripPerAdmission(t *testing.T) {
	s := openStore(t, dynamotest.Prefix(t), dynamostore.Options{})
	ctx := context.Background()
	now := storetest.T0.Add(5 * time.Second)
	c := minuteCharge("rt", now, 100, 1)
	trips := func() int64 { return s.Stats().RoundTrips }

	before := trips()
	if out, err := s.Charge(ctx, now, []limiter.Charge{c}, nil); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	if got := trips() - before; got != 2 {
		t.Fatalf("first admission of the window: %d round trips, want 2 (read prev, then charge)", got)
	}
	for i := range 5 {
		before = trips()
		if out, err := s.Charge(ctx, now.Add(time.Duration(i)*time.Second), []limiter.Charge{c}, nil); err != nil || !out.Admitted {
			t.Fatal(out, err)
		}
		if got := trips() - before; got != 1 {
			t.Fatalf("admission %d: %d round trips, want 1", i+2, got)
		}
	}
	// Three rules are still one round of parallel writes (3 calls in one
	// round trip of latency).
	cs := []limiter.Charge{c, minuteCharge("rt-b", now, 100, 1), minuteCharge("rt-c", now, 100, 1)}
	s.Charge(ctx, now, cs, nil) // warm the prev cache
	before = trips()
	if out, err := s.Charge(ctx, now, cs, nil); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	if got := trips() - before; got != 3 {
		t.Fatalf("three rules: %d calls, want 3 in parallel", got)
	}
}

// A token window's closed count is re-read after TokenPrevRefresh, since
// settlements still change it.
func TestClosedTokenWindowRefreshed(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	s := openStore(t, prefix, dynamostore.Options{TokenPrevRefresh: 10 * time.Second})
	ctx := context.Background()
	w0 := storetest.T0.Add(30 * time.Second)
	tok := limiter.Charge{Counter: limiter.Counter{Rule: "refresh", Kind: limiter.KindTokens, Window: w0.UnixNano() / int64(time.Minute)},
		Period: time.Minute, Limit: 1000, Amount: 600}
	l := &limiter.Lease{ID: "refresh-lease", ExpiresAt: w0.Add(time.Hour), Charges: []limiter.Charge{tok}, Reserved: limiter.Usage{OutputTokens: 600}}
	if out, _ := s.Charge(ctx, w0, []limiter.Charge{tok}, l); !out.Admitted {
		t.Fatal("first charge refused")
	}
	// In the next window prev weighs 600·(1−e/60); at e = 0 a 600 charge
	// does not fit.
	w1 := storetest.T0.Add(time.Minute)
	next := tok
	next.Counter.Window++
	if out, _ := s.Charge(ctx, w1, []limiter.Charge{next}, nil); out.Admitted {
		t.Fatal("600 + 600 admitted against 1000")
	}
	// Settled down to 100 actual tokens: once the cached prev is older
	// than the refresh, the next charge sees it.
	if _, err := s.Settle(ctx, []limiter.Settlement{{Lease: l, Used: limiter.Usage{OutputTokens: 100, Exact: true}}}); err != nil {
		t.Fatal(err)
	}
	if out, _ := s.Charge(ctx, w1.Add(5*time.Second), []limiter.Charge{next}, nil); out.Admitted {
		t.Fatal("the cached prev was re-read before its refresh interval")
	}
	if out, _ := s.Charge(ctx, w1.Add(10*time.Second), []limiter.Charge{next}, nil); !out.Admitted {
		t.Fatalf("after the refresh the settled prev (100) should admit 600: %+v", out)
	}
}

// The reject-only cache answers a repeat refusal locally, for at most its
// TTL, and never admits.
func TestRejectCache(t *testing.T) {
	s := openStore(t, dynamotest.Prefix(t), dynamostore.Options{RejectCacheTTL: 500 * time.Millisecond})
	ctx := context.Background()
	now := storetest.T0.Add(10 * time.Second)
	c := minuteCharge("rej", now, 1, 1)
	if out, _ := s.Charge(ctx, now, []limiter.Charge{c}, nil); !out.Admitted {
		t.Fatal("first refused")
	}
	if out, _ := s.Charge(ctx, now, []limiter.Charge{c}, nil); out.Admitted {
		t.Fatal("second admitted past 1")
	}
	before := s.Stats().RoundTrips
	out, err := s.Charge(ctx, now.Add(400*time.Millisecond), []limiter.Charge{c}, nil)
	if err != nil || out.Admitted || !out.States[0].Refused || out.States[0].Cur != 1 {
		t.Fatalf("cached refusal: %+v %v", out, err)
	}
	if s.Stats().RoundTrips != before {
		t.Fatal("a cached refusal made a round trip")
	}
	s.Charge(ctx, now.Add(600*time.Millisecond), []limiter.Charge{c}, nil)
	if s.Stats().RoundTrips == before {
		t.Fatal("the cache answered past its TTL")
	}
	if _, err := dynamostore.New(dynamostore.Options{API: s2API(t), RejectCacheTTL: 2 * time.Second}); err == nil {
		t.Fatal("a reject cache over one second was accepted")
	}
}

func s2API(t *testing.T) dynamostore.API { return dynamotest.Client(t, dynamostore.ClientOptions{}) }

// A request whose process died holds its slot until its lease's expiry
// and not a moment longer, found from its gauge entry alone: no index, no
// lease item, no sweep. Reads stop counting it at its expiry; the first
// admissions that find the gauge full of such slots reclaim them, and
// however many instances do so at once, the limit holds. Reservations
// stay charged.
func TestDeadSlotReclaimedAtItsExpiry(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	s := openStore(t, prefix, dynamostore.Options{})
	ctx := context.Background()
	now := storetest.T0
	g := limiter.Charge{Counter: limiter.Counter{Rule: "dead-g", Kind: limiter.KindInFlight}, Limit: 3, Amount: 1}
	tok := limiter.Charge{Counter: limiter.Counter{Rule: "dead-t", Kind: limiter.KindTokens, Window: now.UnixNano() / int64(time.Minute)},
		Period: time.Minute, Limit: 10000, Amount: 500}
	for i := range 3 {
		l := &limiter.Lease{ID: fmt.Sprintf("dead-%d", i), AdmittedAt: now, ExpiresAt: now.Add(time.Minute), Charges: []limiter.Charge{g, tok}}
		if out, err := s.Charge(ctx, now, []limiter.Charge{g, tok}, l); err != nil || !out.Admitted {
			t.Fatal(out, err)
		}
	}
	// Their processes die. Until the expiry, they hold the gauge.
	before := now.Add(time.Minute - time.Millisecond)
	l := &limiter.Lease{ID: "too-early", AdmittedAt: before, ExpiresAt: before.Add(time.Minute), Charges: []limiter.Charge{g}}
	if out, err := s.Charge(ctx, before, []limiter.Charge{g}, l); err != nil || out.Admitted || out.Reclaimed {
		t.Fatalf("before the expiry: %+v, %v; want refused, nothing reclaimed", out, err)
	}
	// At the expiry a read counts none, in one call.
	at := now.Add(time.Minute)
	calls := s.Stats().RoundTrips
	st, err := s.Read(ctx, at, []limiter.Charge{g, tok})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Cur != 0 || st[1].Cur != 1500 || s.Stats().RoundTrips-calls != 1 {
		t.Fatalf("at expiry: gauge %d, tokens %d in %d calls; want 0, the 1500 reserved, in 1", st[0].Cur, st[1].Cur, s.Stats().RoundTrips-calls)
	}
	// Five instances admit at once: the full gauge's dead slots are
	// reclaimed, and exactly three get in.
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 5 {
		other := openStore(t, prefix, dynamostore.Options{})
		wg.Go(func() {
			l := &limiter.Lease{ID: fmt.Sprintf("next-%d", i), AdmittedAt: at, ExpiresAt: at.Add(time.Minute), Charges: []limiter.Charge{g}}
			for range 3 { // as the limiter does: charged again after a reclaim
				out, err := other.Charge(ctx, at, []limiter.Charge{g}, l)
				if err != nil {
					t.Error(err)
					return
				}
				if out.Admitted {
					admitted.Add(1)
					return
				}
				if !out.Reclaimed {
					return
				}
				l.ID += "~r"
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 3 {
		t.Fatalf("%d of 5 admitted on a concurrent=3 gauge full of dead slots, want 3", admitted.Load())
	}
	if n, err := s.Expire(ctx, at); err != nil || n != 0 {
		t.Fatalf("Expire: %d, %v; want nothing to sweep", n, err)
	}
	// No lease item was ever written for them.
	api := dynamotest.Client(t, dynamostore.ClientOptions{})
	out, err := api.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(s.Tables().Leases)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 0 {
		t.Fatalf("%d lease items for requests that never completed, want none", len(out.Items))
	}
}

// The sharding accuracy bound, on the real engine: a sharded rule never
// admits more than its limit across concurrent instances.
func TestShardedRuleAcrossInstances(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	rs, err := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeProvider, Subject: "hot", Limit: limiter.Window{Period: time.Minute, MaxRequests: 30}, Shards: 4}})
	if err != nil {
		t.Fatal(err)
	}
	now := storetest.T0.Add(time.Second)
	var admitted atomic.Int64
	var seq atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		l, err := limiter.New(limiter.Config{Store: openStore(t, prefix, dynamostore.Options{}), Rules: rs})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range 10 {
				d, err := l.Admit(context.Background(), now, limiter.Request{
					ID:      fmt.Sprintf("shard-%d", seq.Add(1)),
					Subject: limiter.Subject{UserPath: "/", Provider: "hot", Model: "m"},
				})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// Requests are one unit, so refusals come only once every shard is
	// full: exactly the limit.
	if admitted.Load() != 30 {
		t.Fatalf("%d admitted over 4 shards, want exactly 30", admitted.Load())
	}
}

// A charge sent just before its window closed can land just after another
// process first read the closed window as its previous one. A previous
// request window read within ChargeTimeout of its close is read again each
// second, so the late charge weighs on the next window a second later at
// most; read after that it is final and cached for good.
func TestLateChargeOnClosedWindowSeen(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	reader := openStore(t, prefix, dynamostore.Options{})
	late := openStore(t, prefix, dynamostore.Options{})
	ctx := context.Background()
	closing := storetest.T0.Add(59 * time.Second)
	w0 := minuteCharge("late", closing, 10, 1)
	for range 9 {
		if out, _ := late.Charge(ctx, closing, []limiter.Charge{w0}, nil); !out.Admitted {
			t.Fatal("refused below the limit")
		}
	}
	// 1 s into the next window the reader sees 9 in the previous one.
	at := storetest.T0.Add(61 * time.Second)
	w1 := minuteCharge("late", at, 10, 1)
	out, err := reader.Charge(ctx, at, []limiter.Charge{w1}, nil)
	if err != nil || !out.Admitted || out.States[0].Prev != 9 {
		t.Fatalf("first read of the closed window: %+v %v", out, err)
	}
	// The tenth charge of the closed window lands late.
	if out, _ := late.Charge(ctx, closing, []limiter.Charge{w0}, nil); !out.Admitted {
		t.Fatal("the late charge was refused")
	}
	out, _ = reader.Charge(ctx, at.Add(500*time.Millisecond), []limiter.Charge{w1}, nil)
	if out.States[0].Prev != 9 {
		t.Fatalf("within the second the reader re-read: prev %d", out.States[0].Prev)
	}
	out, _ = reader.Charge(ctx, at.Add(1100*time.Millisecond), []limiter.Charge{w1}, nil)
	if out.States[0].Prev != 10 {
		t.Fatalf("a second later the reader still has prev %d, want the late charge counted (10)", out.States[0].Prev)
	}
	// Past ChargeTimeout after the close, the count is final: cached.
	final := storetest.T0.Add(65 * time.Second)
	reader.Charge(ctx, final, []limiter.Charge{w1}, nil)
	before := reader.Stats().RoundTrips
	reader.Charge(ctx, final.Add(20*time.Second), []limiter.Charge{w1}, nil)
	if got := reader.Stats().RoundTrips - before; got != 1 {
		t.Fatalf("%d round trips once the closed window is final, want 1", got)
	}
}
