package dynamostore

import (
	"context"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// prevCache holds the final counts of closed windows, per process.
type prevCache struct {
	mu    sync.Mutex
	m     map[string]prevEntry
	swept time.Time
}

type prevEntry struct {
	n       int64
	readAt  time.Time // the caller's instant when it was read
	expires time.Time // when no window can need it any more
	tokens  bool      // a token window: settlements may still change it
}

// prevs returns the previous window's final count for each charge (0 for
// gauges), reading in one batch the ones this process does not know yet.
func (s *Store) prevs(ctx context.Context, now time.Time, charges []limiter.Charge) ([]int64, error) {
	out := make([]int64, len(charges))
	var missing []string
	var missingAt []int
	s.prev.mu.Lock()
	s.prev.sweep(now)
	for i := range charges {
		c := &charges[i]
		if c.Period == limiter.Concurrent {
			continue
		}
		key := CounterKey(c.Counter.Previous())
		e, ok := s.prev.m[key]
		fresh := ok && (!e.tokens || (now.Sub(e.readAt) < s.opts.TokenPrevRefresh && !now.Before(e.readAt)))
		if fresh {
			out[i] = e.n
			continue
		}
		missing = append(missing, key)
		missingAt = append(missingAt, i)
	}
	s.prev.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	got, err := s.getCounts(ctx, missing)
	if err != nil {
		return nil, err
	}
	s.prev.mu.Lock()
	defer s.prev.mu.Unlock()
	for j, key := range missing {
		i := missingAt[j]
		c := &charges[i]
		out[i] = got[key]
		s.prev.m[key] = prevEntry{
			n:       got[key],
			readAt:  now,
			expires: c.WindowEnd().Add(c.Period),
			tokens:  c.Counter.Kind.IsTokens(),
		}
	}
	return out, nil
}

// sweep drops entries no window can need, at most once a minute.
func (c *prevCache) sweep(now time.Time) {
	if now.Sub(c.swept) < time.Minute && !now.Before(c.swept) {
		return
	}
	c.swept = now
	for k, e := range c.m {
		if now.After(e.expires) {
			delete(c.m, k)
		}
	}
}

// rejectCache remembers window counters that refused, for RejectCacheTTL.
type rejectCache struct {
	mu sync.Mutex
	m  map[string]rejectEntry
}

type rejectEntry struct {
	prev, cur int64
	at        time.Time
}

const maxRejectEntries = 10000

// check refuses charges locally when a counter among them refused within
// ttl and, by the numbers it returned then, still refuses at now.
func (rc *rejectCache) check(now time.Time, ttl time.Duration, charges []limiter.Charge, keys []string) (limiter.Outcome, bool) {
	if ttl <= 0 {
		return limiter.Outcome{}, false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.m) == 0 {
		return limiter.Outcome{}, false
	}
	var states []limiter.State
	for i := range charges {
		c := &charges[i]
		e, ok := rc.m[keys[i]]
		if !ok || c.Period == limiter.Concurrent {
			continue
		}
		if age := now.Sub(e.at); age < 0 || age > ttl {
			delete(rc.m, keys[i])
			continue
		}
		if e.cur <= c.Ceiling(e.prev, now) {
			continue // would fit now
		}
		if states == nil {
			states = make([]limiter.State, len(charges))
		}
		states[i] = limiter.State{Prev: e.prev, Cur: e.cur, Refused: true}
	}
	if states == nil {
		return limiter.Outcome{}, false
	}
	return limiter.Outcome{States: states}, true
}

func (rc *rejectCache) remember(now time.Time, ttl time.Duration, charges []limiter.Charge, keys []string, states []limiter.State) {
	if ttl <= 0 {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.m) >= maxRejectEntries {
		clear(rc.m)
	}
	for i, st := range states {
		if st.Refused && charges[i].Period != limiter.Concurrent {
			rc.m[keys[i]] = rejectEntry{prev: st.Prev, cur: st.Cur, at: now}
		}
	}
}
