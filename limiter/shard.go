package limiter

import (
	"context"
	"slices"
	"time"
)

// A sharded rule splits each counter over n items whose limits (shares)
// add up to the rule's limit, so the limit holds exactly: no shard admits
// past its share. When a request's shard has no room, one read of every
// shard tells where there is, and the charge is placed there, split over
// several shards when no single one has room enough. A request is refused
// only when all shards together cannot hold it.

// spread is one read of every shard of the sharded counters a charge
// refused.
type spread struct {
	now    time.Time // the instant the charge was refused and the shards read
	groups []*shardGroup
}

// shardGroup is every shard of one rule's counter in one window.
type shardGroup struct {
	base   Counter // shard 0
	gauge  bool
	period time.Duration
	owner  *rule
	limits []int64 // each shard's share
	states []State
}

// group returns the group counter c is a shard of, or nil.
func (sp *spread) group(c Counter) *shardGroup {
	if sp == nil {
		return nil
	}
	for _, g := range sp.groups {
		if samePart(g.base, c) {
			return g
		}
	}
	return nil
}

// readShards reads every shard of the counters refused in states, in one
// store call.
func (l *Limiter) readShards(ctx context.Context, now time.Time, charges []Charge, states []State) (*spread, error) {
	sp := &spread{now: now}
	var reads []Charge
	for i, st := range states {
		c := &charges[i]
		if !st.Refused || layoutOf(c.Counter) < 2 || sp.group(c.Counter) != nil {
			continue
		}
		r := c.owner
		n := layoutOf(c.Counter)
		g := &shardGroup{base: c.Counter, gauge: c.IsGauge(), period: c.Period, owner: r, limits: make([]int64, n)}
		g.base.Shard = 0
		for k := range n {
			rc := r.newCharge(now, c.Counter.Child, c.Counter.Kind, r.limitOf(c.Counter.Kind), k)
			setShard(&rc, c.whole, k, n) // the shares of what the charge's limit was
			g.limits[k] = rc.Limit
			reads = append(reads, rc)
		}
		sp.groups = append(sp.groups, g)
	}
	got, err := l.store.Read(ctx, now, reads)
	if err != nil {
		return nil, err
	}
	for _, g := range sp.groups {
		n := len(g.limits)
		g.states, got = got[:n], got[n:]
	}
	return sp, nil
}

// roomOf is what shard k can take at d after now.
func (g *shardGroup) roomOf(now time.Time, k int, d time.Duration) int64 {
	return max(0, g.signedRoom(now, k, d))
}

// signedRoom is roomOf, negative when the shard holds more than its share
// (a settlement overshot).
func (g *shardGroup) signedRoom(now time.Time, k int, d time.Duration) int64 {
	st := g.states[k]
	limit := g.limits[k]
	if g.gauge {
		return limit - max(st.Cur, 0)
	}
	T := g.period
	_, e := windowAt(now, T)
	var ceiling, cur int64
	switch e += d; {
	case e < T:
		ceiling, cur = slidingCeiling(limit, st.Prev, 0, T, e), st.Cur
	case e < 2*T:
		// The next window: the current count becomes the previous one.
		ceiling = slidingCeiling(limit, st.Cur, 0, T, e-T)
	default:
		ceiling = limit
	}
	return ceiling - max(cur, 0)
}

// room is what all shards together can take at d after now.
func (g *shardGroup) room(now time.Time, d time.Duration) int64 {
	var sum int64
	for k := range g.states {
		sum = SatAdd(sum, g.roomOf(now, k, d))
	}
	return sum
}

// wait returns how long until the shards together take amount, if
// nothing else arrived; false if they never would.
func (g *shardGroup) wait(now time.Time, amount int64) (time.Duration, bool) {
	if amount > g.owner.limitOf(g.base.Kind) {
		return 0, false
	}
	if g.gauge {
		return InFlightRetry, true
	}
	if g.room(now, 0) >= amount {
		return 0, true
	}
	// Room only grows with time (the previous window decays, then the
	// current one does), and after two periods every shard is empty:
	// bisect for the first nanosecond at which it is enough.
	lo, hi := time.Duration(0), 2*g.period
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if g.room(now, mid) >= amount {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

// place returns charges with every refused sharded group moved to the
// shards with the most room, split if need be; false when some group has
// not room enough.
func (sp *spread) place(charges []Charge) ([]Charge, bool) {
	out := make([]Charge, 0, len(charges)+2)
	for i := range charges {
		c := charges[i]
		g := sp.group(c.Counter)
		if g == nil {
			out = append(out, c)
			continue
		}
		if i > 0 && slices.ContainsFunc(charges[:i], func(p Charge) bool { return samePart(p.Counter, c.Counter) }) {
			continue // placed with its first part
		}
		parts, ok := g.split(sp.now, c, groupAmount(charges, i))
		if !ok {
			return nil, false
		}
		out = append(out, parts...)
	}
	return out, true
}

// split places amount over the shards with the most room, as read.
func (g *shardGroup) split(now time.Time, proto Charge, amount int64) ([]Charge, bool) {
	n := len(g.limits)
	if amount == 0 {
		// Nothing to place: any shard that is not overfull takes it.
		for k := range n {
			if g.signedRoom(now, k, 0) >= 0 {
				return []Charge{g.part(now, proto, k, 0)}, true
			}
		}
		return nil, false
	}
	rooms := make([]int64, n)
	order := make([]int, n)
	for k := range n {
		order[k] = k
		rooms[k] = g.roomOf(now, k, 0)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rooms[a] > rooms[b]:
			return -1
		case rooms[a] < rooms[b]:
			return 1
		}
		return 0
	})
	var parts []Charge
	left := amount
	for _, k := range order {
		if left == 0 || rooms[k] <= 0 {
			break
		}
		p := g.part(now, proto, k, min(left, rooms[k]))
		left -= p.Amount
		parts = append(parts, p)
	}
	return parts, left == 0
}

// part is proto's charge moved to shard k, for amount.
func (g *shardGroup) part(now time.Time, proto Charge, k int, amount int64) Charge {
	p := g.owner.newCharge(now, proto.Counter.Child, proto.Counter.Kind, g.owner.limitOf(proto.Counter.Kind), k)
	p.whole = proto.whole
	p.Burndown, p.settleWait = proto.Burndown, proto.settleWait // what plan set on the charge
	setShard(&p, proto.whole, k, len(g.limits))
	if p.Prev != nil {
		p.Prev.Share[0] = p.Limit
	}
	p.Amount = amount
	return p
}
