package dynamostore

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/limiter"
)

// Per-process caches are keyed by counter keys, which per_child rules make
// out of client-chosen paths: each is bounded.
const (
	maxPrevEntries   = 50_000
	maxRejectEntries = 10_000
	maxBucketEntries = 10_000
)

// prevEntry is the final count of a closed window, as this process read it.
type prevEntry struct {
	n      int64
	readAt time.Time // the caller's instant when it was read
	final  bool      // no charge can land on it any more
	tokens bool      // a token window: settlements may still change it
}

// prevRecheck is how soon a closed request window read before it was
// final is read again.
const prevRecheck = time.Second

// fresh reports whether e may be used at now.
func (e prevEntry) fresh(now time.Time, tokenRefresh time.Duration) bool {
	age := now.Sub(e.readAt)
	switch {
	case age < 0:
		return false // a clock that went back: read again
	case e.tokens:
		return age < tokenRefresh
	case e.final:
		return true
	}
	return age < prevRecheck
}

// prevs returns the previous window's final count for each charge (0 for
// gauges), reading in one batch the ones this process does not know yet.
//
// A closed request window never changes once the charges sent before it
// closed have landed, which they do within ChargeTimeout. Read earlier, it
// is read again each second until then, so a charge that lands late is
// missed by other processes for at most a second; read after, it is kept
// for good. A closed token window takes settlements, so it is re-read
// after TokenPrevRefresh.
func (s *Store) prevs(ctx context.Context, now time.Time, charges []limiter.Charge) ([]int64, error) {
	out := make([]int64, len(charges))
	var missing []string
	var missingAt []int
	for i := range charges {
		c := &charges[i]
		if !c.Sliding() {
			continue
		}
		key := prevKey(c)
		if e, ok := s.prev.Get(key); ok && e.fresh(now, s.opts.TokenPrevRefresh) {
			out[i] = e.n
			continue
		}
		missing = append(missing, prevSources(c)...)
		missingAt = append(missingAt, i)
	}
	if len(missing) == 0 {
		return out, nil
	}
	got, err := s.getCounts(ctx, missing)
	if err != nil {
		return nil, err
	}
	for _, i := range missingAt {
		c := &charges[i]
		closed := c.WindowEnd().Add(-c.Period) // the end of the previous window
		out[i] = prevFrom(c, got)
		s.prev.Put(prevKey(c), prevEntry{
			n:      out[i],
			readAt: now,
			final:  !now.Before(closed.Add(s.opts.ChargeTimeout + time.Second)),
			tokens: c.Counter.Kind.IsTokens(),
		})
	}
	return out, nil
}

// rejectCache remembers window counters that refused, for RejectCacheTTL.
type rejectEntry struct {
	prev, cur, reserved int64
	at                  time.Time
}

type rejectCache struct {
	c *lru.Cache[string, rejectEntry]
}

// check refuses charges locally when a counter among them refused within
// ttl and, by the numbers it returned then, still refuses at now.
func (rc rejectCache) check(now time.Time, ttl time.Duration, charges []limiter.Charge, keys []string) (limiter.Outcome, bool) {
	if ttl <= 0 || rc.c.Len() == 0 {
		return limiter.Outcome{}, false
	}
	var states []limiter.State
	for i := range charges {
		c := &charges[i]
		if c.IsGauge() {
			continue
		}
		e, ok := rc.c.Get(keys[i])
		if !ok {
			continue
		}
		if age := now.Sub(e.at); age < 0 || age > ttl {
			rc.c.Delete(keys[i])
			continue
		}
		if e.cur <= c.Ceiling(e.prev, now) {
			continue // would fit now
		}
		if states == nil {
			states = make([]limiter.State, len(charges))
		}
		states[i] = limiter.State{Prev: e.prev, Cur: e.cur, Reserved: e.reserved, Refused: true}
	}
	if states == nil {
		return limiter.Outcome{}, false
	}
	return limiter.Outcome{States: states}, true
}

func (rc rejectCache) remember(now time.Time, ttl time.Duration, charges []limiter.Charge, keys []string, states []limiter.State) {
	if ttl <= 0 {
		return
	}
	for i, st := range states {
		if st.Refused && !charges[i].IsGauge() {
			rc.c.Put(keys[i], rejectEntry{prev: st.Prev, cur: st.Cur, reserved: st.Reserved, at: now})
		}
	}
}

// prevKey names a charge's previous-window count in the cache: the
// previous window's counter, or, in the first window of a new shard
// layout, this shard's share of the old layout's.
func prevKey(c *limiter.Charge) string {
	k := CounterKey(c.Counter.Previous())
	if c.Prev != nil {
		k = "from-old-layout|" + k
	}
	return k
}

// prevSources are the counters a charge's previous-window count is read
// from.
func prevSources(c *limiter.Charge) []string {
	if c.Prev == nil {
		return []string{CounterKey(c.Counter.Previous())}
	}
	keys := make([]string, len(c.Prev.Counters))
	for i, pc := range c.Prev.Counters {
		keys[i] = CounterKey(pc)
	}
	return keys
}

// prevFrom is a charge's previous-window count from the counts read.
func prevFrom(c *limiter.Charge, got map[string]int64) int64 {
	if c.Prev == nil {
		return got[CounterKey(c.Counter.Previous())]
	}
	counts := make([]int64, len(c.Prev.Counters))
	for i, pc := range c.Prev.Counters {
		counts[i] = got[CounterKey(pc)]
	}
	return c.PrevOf(counts)
}
