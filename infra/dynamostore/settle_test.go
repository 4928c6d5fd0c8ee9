package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/storetest"
)

// positioned returns n settlements of leases that each reserved 100
// tokens of window c and used 40, at places from+1 … from+n of log.
func positioned(c limiter.Charge, log string, from, n int) []limiter.Settlement {
	out := make([]limiter.Settlement, n)
	for i := range out {
		at := from + 1 + i
		l := &limiter.Lease{ID: fmt.Sprintf("%s-lease-%d", log, at), ExpiresAt: storetest.T0.Add(time.Hour), Charges: []limiter.Charge{c},
			Reserved: limiter.Usage{InputTokens: 100}}
		out[i] = limiter.Settlement{Lease: l, Used: limiter.Usage{InputTokens: 40, Exact: true},
			Position: limiter.Position{Log: log, Order: fmt.Sprintf("%010d", at)}}
	}
	return out
}

// charged admits n requests of 100 tokens each on c.
func charged(t *testing.T, s *dynamostore.Store, now time.Time, c limiter.Charge, n int) {
	t.Helper()
	for range n {
		if out, err := s.Charge(context.Background(), now, []limiter.Charge{c}, nil); err != nil || !out.Admitted {
			t.Fatal(out, err)
		}
	}
}

// Settlements read from a log (the lease table's stream) are applied once
// however they are replayed: again whole, again from an older checkpoint
// overlapping new ones, by two reconcilers at once. What makes it once is
// the log's cursor, one guard item per transaction: settling five leases
// writes one cursor and one counter, not a marker each.
func TestSettleCursorExactlyOnce(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	s := openStore(t, prefix, dynamostore.Options{})
	ctx := context.Background()
	now := storetest.T0.Add(time.Second)
	c := limiter.Charge{Counter: limiter.Counter{Rule: "cursor-tok", Kind: limiter.KindTokens, Window: now.UnixNano() / int64(time.Minute)},
		Period: time.Minute, Limit: 1 << 40, Amount: 100}
	charged(t, s, now, c, 12)
	tokens := func() int64 { return cur(t, s, now, c)[0] }

	first := positioned(c, "shard-a", 0, 5)
	before := s.Stats().TransactItems
	if n, err := s.Settle(ctx, first); err != nil || n != 5 {
		t.Fatalf("first settle: %d, %v", n, err)
	}
	if items := s.Stats().TransactItems - before; items != 2 {
		t.Fatalf("five settlements wrote %d transactional items, want 2 (the cursor and the counter)", items)
	}
	if got := tokens(); got != 12*100-5*60 {
		t.Fatalf("tokens %d after five refunds of 60, want %d", got, 12*100-5*60)
	}
	// The same batch again: nothing.
	if n, err := s.Settle(ctx, positioned(c, "shard-a", 0, 5)); err != nil || n != 0 {
		t.Fatalf("replay: %d, %v; want 0", n, err)
	}
	// From an older checkpoint, reaching past: only the new ones.
	if n, err := s.Settle(ctx, positioned(c, "shard-a", 2, 6)); err != nil || n != 3 {
		t.Fatalf("overlapping replay: %d, %v; want the 3 new ones", n, err)
	}
	// Another log is its own.
	if n, err := s.Settle(ctx, positioned(c, "shard-b", 0, 2)); err != nil || n != 2 {
		t.Fatalf("another shard: %d, %v; want 2", n, err)
	}
	if got := tokens(); got != 12*100-10*60 {
		t.Fatalf("tokens %d, want %d: ten settled once each", got, 12*100-10*60)
	}
	// Two reconcilers at once on the next records: each applied once.
	var applied atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		other := openStore(t, prefix, dynamostore.Options{})
		wg.Go(func() {
			n, err := other.Settle(ctx, positioned(c, "shard-b", 2, 2))
			if err != nil {
				t.Error(err)
			}
			applied.Add(int64(n))
		})
	}
	wg.Wait()
	if applied.Load() != 2 || tokens() != 12*100-12*60 {
		t.Fatalf("two reconcilers applied %d, tokens %d; want 2 and %d", applied.Load(), tokens(), 12*100-12*60)
	}
}

// A settlement transaction whose answer is lost, or that never reaches the
// engine, is applied once when the batch is passed again.
func TestSettleCursorUnderFaults(t *testing.T) {
	ctx := context.Background()
	now := storetest.T0.Add(time.Second)
	for _, mode := range []string{lose, apply500, drop} {
		t.Run(mode, func(t *testing.T) {
			s, f, _ := lostStore(t)
			c := limiter.Charge{Counter: limiter.Counter{Rule: "cursor-fault-" + mode, Kind: limiter.KindTokens, Window: now.UnixNano() / int64(time.Minute)},
				Period: time.Minute, Limit: 1 << 40, Amount: 100}
			charged(t, s, now, c, 3)
			f.inject("TransactWriteItems", 4, mode, "") // every attempt
			if _, err := s.Settle(ctx, positioned(c, "shard-f", 0, 3)); err == nil {
				t.Fatal("a settlement whose every attempt failed reported no error")
			}
			if _, err := s.Settle(ctx, positioned(c, "shard-f", 0, 3)); err != nil {
				t.Fatalf("the batch passed again: %v", err)
			}
			if got := cur(t, s, now, c)[0]; got != 3*40 {
				t.Fatalf("tokens %d, want %d: three settled once each", got, 3*40)
			}
		})
	}
}

// More counters than one transaction holds: the log is settled in order,
// chunk after chunk, and a chunk that fails stops it there, so the cursor
// never passes a settlement not applied.
func TestSettleCursorInChunks(t *testing.T) {
	s, f, _ := lostStore(t)
	ctx := context.Background()
	now := storetest.T0.Add(time.Second)
	var all []limiter.Settlement
	var cs []limiter.Charge
	for i := range 150 {
		c := limiter.Charge{Counter: limiter.Counter{Rule: fmt.Sprintf("chunk-%d", i), Kind: limiter.KindTokens, Window: now.UnixNano() / int64(time.Minute)},
			Period: time.Minute, Limit: 1 << 40, Amount: 100}
		cs = append(cs, c)
		all = append(all, positioned(c, "shard-c", i, 1)...)
	}
	for _, c := range cs {
		charged(t, s, now, c, 1)
	}
	// The first chunk lands, the second fails: the batch reports it.
	f.inject("TransactWriteItems", 1, "", "")
	f.inject("TransactWriteItems", 4, drop, "")
	n, err := s.Settle(ctx, all)
	if !errors.Is(err, limiter.ErrStoreUnavailable) || n == 0 || n == 150 {
		t.Fatalf("settle with its second chunk failing: %d, %v; want some applied and ErrStoreUnavailable", n, err)
	}
	rest, err := s.Settle(ctx, all)
	if err != nil || n+rest != 150 {
		t.Fatalf("settled %d then %d (%v), want 150 in all", n, rest, err)
	}
	for i, c := range cs {
		if got := cur(t, s, now, c)[0]; got != 40 {
			t.Fatalf("counter %d holds %d, want 40", i, got)
		}
	}
}
