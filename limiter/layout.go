package limiter

import (
	"context"
	"sync"
	"time"
)

// A sharded rule's counters are laid out over Shards items whose limits
// (shares) add up to the rule's limit. The layout is part of each
// counter's key, so the items of two layouts are never confused. When a
// rule's Shards changes while it runs, every instance must agree on which
// layout counts what, or the two layouts' shares would add up to twice
// the limit. The configuration store records each change with the instant
// it counts from, the same for every instance (Rule.ShardHistory), and:
//
//   - a window rule keeps its old layout until the first window boundary
//     at or after that instant; the first window of the new layout takes
//     the old layout's final count as its previous window, each new shard
//     its share of it, rounded up;
//   - a concurrency rule, whose slots have no windows, refuses for
//     LayoutSettle from that instant (admissions to the old layout that
//     were on their way then have landed), then admits on the new layout
//     what the old one's slots, as last read, leave of the limit, until
//     they are all given back.
//
// So the limit holds exactly across a change of shards; the price is a
// window of the old layout, or a few seconds of refusals. A further change
// counts no earlier than NextLayoutChange, once nothing needs the layout
// before the last.

// ShardLayout is one layout of a rule's shards and the instant from which
// it counts.
type ShardLayout struct {
	Shards int
	Since  time.Time
}

// LayoutSettle is how long a concurrency rule refuses after its shard
// layout changes: longer than any admission's writes take to land.
const LayoutSettle = 5 * time.Second

const maxShardHistory = 4

// layouts returns the rule's layout history, with Shards as the only
// entry when there is none.
func (r *rule) layouts() []ShardLayout {
	if len(r.ShardHistory) == 0 {
		return []ShardLayout{{Shards: r.Shards}}
	}
	return r.ShardHistory
}

// current returns the index of the layout in force for window w (window
// rules) or at now (concurrency rules).
func (r *rule) current(now time.Time, w int64) int {
	hist := r.layouts()
	gauge := r.isGauge()
	i := 0
	for j := 1; j < len(hist); j++ {
		if (gauge && !now.Before(hist[j].Since)) || (!gauge && w >= r.switchWindows[j]) {
			i = j
		}
	}
	return i
}

// layoutAt returns how many shards the rule's counter has in window w
// (window rules) or at now (concurrency rules).
func (r *rule) layoutAt(now time.Time, w int64) int {
	if len(r.ShardHistory) == 0 {
		return max(r.Shards, 1)
	}
	return max(r.layouts()[r.current(now, w)].Shards, 1)
}

// changed reports whether layout i of the history differs from the one
// before it.
func (r *rule) changed(i int) bool {
	hist := r.layouts()
	return i > 0 && max(hist[i].Shards, 1) != max(hist[i-1].Shards, 1)
}

// settling reports whether a concurrency rule is in the few seconds after
// its layout changed, when it admits nothing.
func (r *rule) settling(now time.Time) bool {
	if !r.isGauge() {
		return false
	}
	i := r.current(now, 0)
	return r.changed(i) && now.Before(r.layouts()[i].Since.Add(LayoutSettle))
}

// draining returns the layout a concurrency rule's previous slots may
// still be held on, and whether there is one.
func (r *rule) draining(now time.Time) (int, bool) {
	if !r.isGauge() {
		return 0, false
	}
	i := r.current(now, 0)
	if !r.changed(i) || now.Before(r.layouts()[i].Since.Add(LayoutSettle)) {
		return 0, false
	}
	return max(r.layouts()[i-1].Shards, 1), true
}

// newCharge returns rule r's charge of one dimension at now on shard k of
// its layout, with that shard's share of limit and, in the first window
// of a new layout, where its previous window's count comes from.
//
// Each kind counts on its own shape: a bucket on one counter for its life
// (its arrival time, limited in nanoseconds of refill), a budget on its
// calendar period's fixed window (Counter.Window is the period's start in
// Unix seconds), a fixed window on the window's (its index since the
// epoch), a gauge and a sliding window on the shards of their layout.
func (r *rule) newCharge(now time.Time, child string, kind Kind, limit int64, k int) Charge {
	var c Charge
	r.fillCharge(&c, now, child, kind, limit, k)
	return c
}

// fillCharge sets the zero charge c to what newCharge returns.
func (r *rule) fillCharge(c *Charge, now time.Time, child string, kind Kind, limit int64, k int) {
	// Field by field into the zero charge: a Counter built aside and
	// copied in is read back in halves its stores have not finished.
	c.Counter.Rule, c.Counter.Child, c.Counter.Kind = r.counter, child, kind
	c.Period, c.Limit, c.owner, c.whole = r.span, limit, r, limit
	switch lim := r.Limit.(type) {
	case Bucket:
		c.Shape, c.Unit, c.Limit, c.Floor = ShapeBucket, int64(lim.Interval()), lim.fill(), now.UnixNano()
		return
	case Budget:
		start, end := lim.Calendar.Bounds(now, lim.Location)
		c.Shape, c.Counter.Window, c.End = ShapeFixed, start.Unix(), end
		return
	case Gauge:
		setShard(c, limit, k, r.layoutAt(now, 0))
		return
	}
	// A window, whose Period is the rule's span (not copied out of the
	// rule's Limit: a decision plans several).
	c.Counter.Window, _ = windowAt(now, r.span)
	if r.fixed {
		c.Shape = ShapeFixed
		c.End = time.Unix(0, (c.Counter.Window+1)*int64(r.span))
		return
	}
	n := r.layoutAt(now, c.Counter.Window)
	setShard(c, limit, k, n)
	if p := r.layoutAt(now, c.Counter.Window-1); p != n {
		prev := c.Counter.Previous()
		c.Prev = &PrevLayout{Counters: make([]Counter, p), Share: [2]int64{c.Limit, max(limit, 1)}}
		for j := range p {
			pc := prev
			pc.Shard, pc.Shards = j, layoutField(p)
			c.Prev.Counters[j] = pc
		}
	}
}

func layoutField(n int) int {
	if n <= 1 {
		return 0
	}
	return n
}

// layoutOf is how many shards the rule of c was split into when c counted.
func layoutOf(c Counter) int { return max(c.Shards, 1) }

// NextLayoutChange returns the earliest instant from which a further
// change of r's shards may count, so that no instance ever needs a layout
// older than the one before the last: for a window rule, the window after
// the first window of its latest layout (which read the one before); for a
// concurrency rule, once the previous layout's slots have had a lease's
// lifetime to be given back. Zero when the rule has no history.
func NextLayoutChange(r Rule, leaseTTL time.Duration) time.Time {
	if len(r.ShardHistory) < 2 {
		return time.Time{}
	}
	since := r.ShardHistory[len(r.ShardHistory)-1].Since
	switch lim := r.Limit.(type) {
	case Gauge:
		return since.Add(LayoutSettle + leaseTTL)
	case Window:
		return time.Unix(0, (firstWindowFrom(since, lim.Period)+1)*int64(lim.Period))
	}
	return time.Time{} // the other kinds have one item, never shards

}

// firstWindowFrom is the first window starting at or after t.
func firstWindowFrom(t time.Time, period time.Duration) int64 {
	w, elapsed := windowAt(t, period)
	if elapsed > 0 {
		w++
	}
	return w
}

// oldSlots remembers, per concurrency rule (and child) whose layout
// changed, how many slots its old layout held when last read, so that a
// read serves the admissions of the next second.
type oldSlots struct {
	mu sync.Mutex
	m  map[Counter]oldRead
}

type oldRead struct {
	n  int64
	at time.Time
}

// maxOldSlots bounds the entries (children are the client's to choose).
const maxOldSlots = 4096

// drain lowers, for each charge of a concurrency rule whose old layout may
// still hold slots, the limit its new layout shares by what the old
// layout holds: read at most a second ago, and only ever less since, so
// the two layouts together never hold more than the limit.
func (l *Limiter) drain(ctx context.Context, now time.Time, charges []Charge) error {
	for i := range charges {
		c := &charges[i]
		r := c.owner
		if r == nil || c.Counter.Kind != KindInFlight {
			continue
		}
		old, ok := r.draining(now)
		if !ok {
			continue
		}
		key := c.Counter
		key.Shard, key.Shards = 0, layoutField(old)
		l.old.mu.Lock()
		e, cached := l.old.m[key]
		l.old.mu.Unlock()
		if !cached || (e.n > 0 && (now.Sub(e.at) >= time.Second || now.Before(e.at))) {
			reads := make([]Charge, old)
			for j := range old {
				reads[j] = Charge{Counter: key}
				reads[j].Counter.Shard = j
			}
			st, err := l.store.Read(ctx, now, reads)
			if err != nil {
				return err
			}
			e = oldRead{at: now}
			for _, s := range st {
				e.n += max(s.Cur, 0)
			}
			l.old.mu.Lock()
			if l.old.m == nil || len(l.old.m) >= maxOldSlots {
				l.old.m = map[Counter]oldRead{}
			}
			l.old.m[key] = e
			l.old.mu.Unlock()
		}
		c.whole = max(r.limitOf(KindInFlight)-e.n, 0)
		setShard(c, c.whole, c.Counter.Shard, layoutOf(c.Counter))
	}
	return nil
}
