package limiter

import (
	"context"
	"slices"
	"time"
)

// RuleUsage is one rule's live state.
type RuleUsage struct {
	Rule  Rule
	Child string // the child a per_child rule was resolved to

	// Dimensions the rule limits, in the order requests, tokens, input
	// tokens, output tokens; or the in-flight gauge of a concurrent rule.
	Dimensions []DimensionUsage

	// WindowStart and WindowEnd bound the current window; zero for
	// concurrent rules.
	WindowStart, WindowEnd time.Time
}

// DimensionUsage is one counter's live state.
type DimensionUsage struct {
	Kind  Kind
	Limit int64
	// Used is the current window's count (or what is in flight); Previous
	// the last window's, which still weighs on the sliding estimate.
	Used     int64
	Previous int64
	// Remaining is what the rule leaves of the limit now: under the
	// sliding estimate, in a fixed window or budget period, or in a bucket.
	Remaining int64
	// Reserved is, for a budget, the part of Used that requests not yet
	// settled reserved: Used − Reserved is spent.
	Reserved int64
	// Refill is how long a bucket takes to be full again.
	Refill time.Duration
}

// AllUsage reads the live state of every rule in force, except per_child
// templates, whose counters belong to each child (see Usage).
func (l *Limiter) AllUsage(ctx context.Context, now time.Time) ([]RuleUsage, error) {
	rs := l.rules.Load()
	ms := make([]match, 0, len(rs.list))
	for _, r := range rs.list {
		if !r.PerChild {
			ms = append(ms, match{rule: r})
		}
	}
	return l.usage(ctx, now, ms)
}

// RuleUsage returns the live state of the rule with key k, or nil when no
// such rule is loaded or it is counted per child (whose children's state is
// read through Usage).
func (l *Limiter) RuleUsage(ctx context.Context, now time.Time, k RuleKey) (*RuleUsage, error) {
	rs := l.rules.Load()
	i := slices.IndexFunc(rs.list, func(r *rule) bool { return r.key == k })
	if i < 0 || rs.list[i].PerChild {
		return nil, nil
	}
	us, err := l.usage(ctx, now, []match{{rule: rs.list[i]}})
	if err != nil || len(us) == 0 {
		return nil, err
	}
	return &us[0], nil
}

func (l *Limiter) usage(ctx context.Context, now time.Time, ms []match) ([]RuleUsage, error) {
	var reads []Charge
	for _, m := range ms {
		r := m.rule
		for _, k := range r.Limit.dimensions() {
			limit := r.limitOf(k)
			if limit <= 0 {
				continue
			}
			// A sharded counter is read shard by shard and summed below.
			first := r.newCharge(now, m.child, k, limit, 0)
			reads = append(reads, first)
			for shard := 1; shard < layoutOf(first.Counter); shard++ {
				reads = append(reads, r.newCharge(now, m.child, k, limit, shard))
			}
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	states, err := l.store.Read(ctx, now, reads)
	if err != nil {
		return nil, err
	}
	var out []RuleUsage
	for i := 0; i < len(reads); {
		c := reads[i]
		r := c.owner
		if len(out) == 0 || out[len(out)-1].Rule.Key() != r.key || out[len(out)-1].Child != c.Counter.Child {
			out = append(out, ruleUsageAt(now, r, c))
		}
		n := layoutOf(c.Counter)
		out[len(out)-1].Dimensions = append(out[len(out)-1].Dimensions, dimensionUsage(now, &c, states[i:i+n]))
		i += n
	}
	return out, nil
}

// ruleUsageAt is rule r's usage, with no dimensions yet, in the window or
// calendar period of its charge c: none for gauges and buckets.
func ruleUsageAt(now time.Time, r *rule, c Charge) RuleUsage {
	u := RuleUsage{Rule: r.Rule, Child: c.Counter.Child}
	switch lim := r.Limit.(type) {
	case Budget:
		u.WindowStart, u.WindowEnd = lim.Calendar.Bounds(now, lim.Location)
	case Window:
		u.WindowStart = time.Unix(0, c.Counter.Window*int64(lim.Period))
		u.WindowEnd = u.WindowStart.Add(lim.Period)
	}
	return u
}

// dimensionUsage is what the counter of charge c holds, summed over the
// states of its shards.
func dimensionUsage(now time.Time, c *Charge, shards []State) DimensionUsage {
	d := DimensionUsage{Kind: c.Counter.Kind, Limit: c.owner.limitOf(c.Counter.Kind)}
	for _, st := range shards {
		d.Used += st.Cur
		d.Previous += st.Prev
		d.Reserved += st.Reserved
	}
	switch {
	case c.Shape == ShapeBucket:
		q := quotaOf(now, c, c.owner, shards[0])
		d.Used, d.Remaining, d.Refill = d.Limit-q.Remaining, q.Remaining, q.Reset
	case c.IsGauge(), c.Shape == ShapeFixed:
		d.Remaining = max(0, d.Limit-d.Used)
	default:
		_, elapsed := windowAt(now, c.Period)
		d.Remaining = slidingRemaining(d.Limit, d.Previous, d.Used, c.Period, elapsed)
	}
	return d
}
