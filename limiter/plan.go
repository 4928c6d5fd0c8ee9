package limiter

import (
	"cmp"
	"time"
)

// planner turns the rules one request matches into its charges: each
// kind plans its own (Window.plan, Gauge.plan, Bucket.plan, Budget.plan)
// through the shared steps below.
type planner struct {
	l   *Limiter
	now time.Time
	// req is a copy, not a pointer: the charges go to the heap with the
	// lease, and escape analysis, which does not tell a struct's fields
	// apart, would move a request pointed to beside them there too (one
	// allocation more per admission, BenchmarkDecision).
	req Request
	// total is what a standard token window is charged, bedrock a
	// QuotaBedrock one's; burndown the output burndown.
	total, bedrock, burndown int64
	// cost is what a budget is charged, found when the first is planned.
	cost  int64
	costs bool

	charges []Charge
	// slot is set when a gauge is charged, so the lease holds a slot;
	// settles when a token or money counter is, so the lease is settled.
	slot, settles bool
	// streamFor is the shortest MaxDuration of the stream gauges charged.
	streamFor time.Duration
}

// plan turns matched rules into charges, and the lease that holds them
// when something is to be given back or settled. A sharded rule's charge
// goes to the request's shard (picked by its id); one larger than that
// shard's share spills over the next shards, so a request is never
// refused only because no single shard could hold it. The charges are
// planned in buf when it is large enough.
func (l *Limiter) plan(now time.Time, req Request, ms []match, buf []Charge) ([]Charge, *Lease) {
	n := 0
	for _, m := range ms {
		n += m.rule.charges
	}
	burndown := max(req.OutputBurndown, 1)
	p := planner{
		l: l, now: now, req: req, burndown: burndown,
		total:   SatAdd(req.InputTokens, req.OutputTokens),
		bedrock: bedrockTokens(req.InputTokens, req.OutputTokens, burndown),
		charges: buf[:0],
	}
	if cap(buf) < n {
		p.charges = make([]Charge, 0, n)
	}
	for _, m := range ms {
		if w := m.rule.window; w != nil { // most rules: no copy of the limit
			w.plan(&p, m)
			continue
		}
		// One case per kind; no method set of the interface, so that
		// the planner stays on the stack.
		switch lim := m.rule.Limit.(type) {
		case Gauge:
			lim.plan(&p, m)
		case Bucket:
			lim.plan(&p, m)
		case Budget:
			lim.plan(&p, m)
		}
	}
	if !p.slot && (!p.settles || req.ConsumerOnly) {
		return p.charges, nil
	}
	lease := newLease(now, cmp.Or(req.LeaseTTL, l.leaseTTL), &req, p.charges)
	lease.MaxStreamDuration = p.streamFor
	return p.charges, lease
}

// newLease is the lease of a request's planned charges, which hold a
// slot or are to be settled (a consumer-only request settles nothing),
// expiring ttl after now.
func newLease(now time.Time, ttl time.Duration, req *Request, charges []Charge) *Lease {
	return &Lease{
		ID:         req.ID,
		AdmittedAt: now,
		ExpiresAt:  now.Add(ttl),
		UserPath:   req.UserPath,
		Provider:   req.Provider,
		Model:      req.Model,
		Route:      req.Route,
		Key:        req.Key,
		Reserved:   Usage{InputTokens: req.InputTokens, OutputTokens: req.OutputTokens},
		Price:      req.Price,
		Charges:    charges,
	}
}

// add charges amount to rule m's counter of kind, whose limit is limit
// (none when it is 0): on the request's shard, spilling over the next
// ones when it is larger than that shard's share.
func (p *planner) add(m match, kind Kind, limit, amount int64) {
	if limit <= 0 {
		return
	}
	r := m.rule
	if r.settling(p.now) {
		limit = 0 // its layout is changing: see layout.go
	}
	// Planned in place: a charge is a few hundred bytes, not copied.
	p.charges = append(p.charges, Charge{})
	c := &p.charges[len(p.charges)-1]
	r.fillCharge(c, p.now, m.child, kind, limit, 0)
	c.Amount = amount
	p.burnDown(r, c)
	if c.Counter.Shards <= 1 {
		return
	}
	shards := c.Counter.Shards
	p.charges = p.charges[:len(p.charges)-1]
	first := int(fnv(p.req.ID, r.counter) % uint64(shards))
	left := amount
	for i := range shards {
		s := r.newCharge(p.now, m.child, kind, limit, (first+i)%shards)
		s.Burndown = c.Burndown
		if left <= s.Limit || i == shards-1 || amount > limit {
			s.Amount = left
			p.charges = append(p.charges, s)
			return
		}
		s.Amount = s.Limit
		left -= s.Limit
		p.charges = append(p.charges, s)
	}
}

// fair charges amount to rule m's counter of kind on its fair-share
// ceiling for the request's member (the limit less what the other
// members are owed), beside the member's own counter.
func (p *planner) fair(m match, kind Kind, limit, amount int64) {
	r := m.rule
	proto := memberProto(p.now, r, m.child, kind, limit)
	member := p.l.fairMemberOf(p.now, r, r.FairShare.member(r.Rule, p.req.Subject, p.req.Class), proto)
	c := r.newCharge(p.now, m.child, kind, max(1, p.l.fairLimit(p.now, r, r.FairShare, limit, member, proto)), 0)
	c.Amount, c.member = amount, member
	p.burnDown(r, &c)
	p.charges = append(p.charges, c, memberCharge(c, member))
}

// burnDown sets the output burndown on the token charge of a QuotaBedrock
// window.
func (p *planner) burnDown(r *rule, c *Charge) {
	if c.Counter.Kind == KindTokens && r.bedrock {
		c.Burndown = p.burndown
	}
}

// plan charges each limited dimension: a request to the request window,
// the tokens to the token windows. With fair share the primary dimension
// (requests, else tokens) shares fairly.
func (w *Window) plan(p *planner, m match) {
	tok := p.total
	if w.Quota == QuotaBedrock {
		tok = p.bedrock
	}
	switch {
	case m.rule.FairShare == nil:
		p.add(m, KindRequests, w.MaxRequests, 1)
		p.add(m, KindTokens, w.MaxTokens, tok)
	case w.MaxRequests > 0:
		p.fair(m, KindRequests, w.MaxRequests, 1)
		p.add(m, KindTokens, w.MaxTokens, tok)
	default:
		p.fair(m, KindTokens, w.MaxTokens, tok)
	}
	p.add(m, KindInputTokens, w.MaxInputTokens, p.req.InputTokens)
	p.add(m, KindOutputTokens, w.MaxOutputTokens, p.req.OutputTokens)
	p.settles = p.settles || w.countsTokens()
}

// plan takes a slot, but for a consumer-only request, which holds none.
func (g Gauge) plan(p *planner, m match) {
	if p.req.ConsumerOnly || g.MaxInFlight <= 0 || g.Streams && !p.req.Stream {
		return
	}
	if g.MaxDuration > 0 && (p.streamFor == 0 || g.MaxDuration < p.streamFor) {
		p.streamFor = g.MaxDuration
	}
	if m.rule.FairShare != nil {
		p.fair(m, KindInFlight, g.MaxInFlight, 1)
	} else {
		p.add(m, KindInFlight, g.MaxInFlight, 1)
	}
	p.slot = true
}

// plan reserves the request's cost at its price.
func (b Budget) plan(p *planner, m match) {
	if !p.costs {
		p.cost, p.costs = p.req.Price.Cost(Usage{InputTokens: p.req.InputTokens, OutputTokens: p.req.OutputTokens}), true
	}
	start := len(p.charges)
	if m.rule.FairShare != nil {
		p.fair(m, KindCost, b.MaxCost, p.cost)
	} else {
		p.add(m, KindCost, b.MaxCost, p.cost)
	}
	for i := start; i < len(p.charges); i++ {
		p.charges[i].settleWait = p.l.settleWait
	}
	p.settles = p.settles || p.cost > 0
}

// plan takes one request, or the request's tokens, out of the bucket: in
// nanoseconds of refill. More than the bucket holds asks one unit more
// than it holds: refused, and never more than its arithmetic holds. With
// fair share the bucket holds what the other members are owed of its
// capacity: its limit (in refill time) is lowered by it.
func (b Bucket) plan(p *planner, m match) {
	r := m.rule
	kind, units := KindRequests, int64(1)
	if b.Tokens {
		kind, units = KindTokens, p.total
		p.settles = true
	}
	c := r.newCharge(p.now, m.child, kind, b.Capacity, 0)
	c.units = units
	c.Amount = SatMul(min(units, b.Capacity+1), c.Unit)
	if r.FairShare == nil {
		p.charges = append(p.charges, c)
		return
	}
	proto := memberProto(p.now, r, m.child, kind, b.Capacity)
	member := p.l.fairMemberOf(p.now, r, r.FairShare.member(r.Rule, p.req.Subject, p.req.Class), proto)
	owed := b.Capacity - p.l.fairLimit(p.now, r, r.FairShare, b.Capacity, member, proto)
	c.Limit = max(c.Unit, c.Limit-SatMul(owed, c.Unit))
	c.member = member
	mc := proto
	mc.Amount = units
	p.charges = append(p.charges, c, memberCharge(mc, member))
}
