package limiter

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLeaseTTL is how long an admitted request may hold its slot if its
// process dies without completing it: Lambda's longest run.
const DefaultLeaseTTL = 15 * time.Minute

// Config configures a Limiter.
type Config struct {
	Store Store
	Rules *Rules // nil means no rules
	// LeaseTTL bounds how long a request holds its in-flight slot when its
	// process dies before completing it. Zero means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// SettleWait is how long after a request completes its reservations
	// are expected to be settled (the reconciler's interval and a margin):
	// the Retry-After of a budget refused only for what is reserved in
	// it. Zero means DefaultSettleWait.
	SettleWait time.Duration
}

// DefaultSettleWait is the SettleWait of a limiter configured with none.
const DefaultSettleWait = 10 * time.Second

// Limiter decides admissions against a rule set and a Store. It is safe for
// concurrent use; the rule set can be swapped while requests are decided.
type Limiter struct {
	store      Store
	rules      atomic.Pointer[Rules]
	leaseTTL   time.Duration
	settleWait time.Duration
	old        oldSlots // concurrency rules whose shard layout changed
	fair       fairShares
}

// New returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if cfg.Store == nil {
		return nil, errors.New("limiter: no store")
	}
	if cfg.LeaseTTL < 0 {
		return nil, errors.New("limiter: negative lease TTL")
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.SettleWait < 0 {
		return nil, errors.New("limiter: negative settle wait")
	}
	l := &Limiter{store: cfg.Store, leaseTTL: cfg.LeaseTTL, settleWait: cmp.Or(cfg.SettleWait, DefaultSettleWait)}
	if cfg.Rules == nil {
		cfg.Rules, _ = NewRules(nil)
	}
	l.rules.Store(cfg.Rules)
	return l, nil
}

// Rules returns the rule set in force.
func (l *Limiter) Rules() *Rules { return l.rules.Load() }

// SetRules replaces the rule set; requests already admitted keep what they
// were charged.
func (l *Limiter) SetRules(rs *Rules) { l.rules.Store(rs) }

// Request is what admission needs to know of a request.
type Request struct {
	// ID is unique per request; it names the lease and picks shards.
	ID string
	Subject
	Route string // for the lease record and logs: "chat", "embeddings", …
	// InputTokens is the estimate of the prompt; OutputTokens the output
	// reservation (max_tokens, or a default when the client sets none).
	InputTokens  int64
	OutputTokens int64
	// OutputBurndown is how many tokens of a QuotaBedrock rule one output
	// token of the serving model counts for (Bedrock's burndown: 5 for
	// recent Claude models); 0 is 1. Rules of the standard quota ignore
	// it.
	OutputBurndown int64
	// Price is what the request's tokens cost, for budgets, which it
	// reserves InputTokens and OutputTokens at; a zero price charges
	// budgets nothing (the gateway never leaves a model unpriced).
	Price Price
	// ConsumerOnly admits by the consumer's rules only (user path, tag
	// and key scopes), as one request holding no slot and reserving
	// nothing: a batch submission, whose file may mix models and whose
	// usage arrives much later.
	ConsumerOnly bool
	// Stream is set for a streaming request: max_streams gauges
	// (Gauge.Streams) count those only.
	Stream bool
	// Class is the request's traffic class, for fair shares by class.
	Class string
	// LeaseTTL, when set, is how long the lease holds its slots instead of
	// the limiter's LeaseTTL: a Realtime session's maximum duration, held
	// without renewal until it is ended or expires.
	LeaseTTL time.Duration
}

// Admit decides whether req may go at now. Every matching rule is charged
// all-or-nothing: request windows by one, token windows by the reservation,
// in-flight gauges by one slot held by the returned lease. A refusal is a
// Decision, not an error; the error is the store's, or ErrInvalidAmount for
// amounts outside 0..MaxAmount.
//
// It makes at most three store calls, whatever the rules' shard counts: the
// charge; on a refusal by sharded counters alone, one read of every shard
// of the refused rules; and one more charge placed where that read found
// room. A refusal after which the store reclaimed slots is charged once
// more, under a new lease.
func (l *Limiter) Admit(ctx context.Context, now time.Time, req Request) (Decision, error) {
	if !req.valid() || req.LeaseTTL < 0 {
		return Decision{}, ErrInvalidAmount
	}
	var buf [16]match
	ms := l.rules.Load().appendMatches(buf[:0], req.Subject, req.ConsumerOnly)
	if len(ms) == 0 {
		return Decision{Allowed: true}, nil
	}
	l.refreshFairs(ctx, now, ms)
	pooled := chargeBufs.Get().(*[]Charge)
	charges, lease := l.plan(now, req, ms, *pooled)
	if err := l.drain(ctx, now, charges); err != nil {
		return Decision{}, err
	}
	out, err := l.store.Charge(ctx, now, charges, lease)
	if err != nil {
		return Decision{}, err
	}
	l.noteFairs(ctx, now, charges, out)
	if !out.Admitted && out.Reclaimed {
		lease = renamed(lease, "~r")
		if out, err = l.store.Charge(ctx, now, charges, lease); err != nil {
			return Decision{}, err
		}
	}
	if !out.Admitted && onlyShadowRefused(charges, out.States) {
		// A shadow rule's gauge is at the most one item holds: that rule
		// would refuse, and is left out of this admission.
		shadowed := shadowRefusals(now, charges, out.States, false)
		charges = slices.DeleteFunc(slices.Clone(charges), func(c Charge) bool { return c.shadow() && c.IsGauge() })
		lease = renamed(lease, "~h")
		if lease != nil {
			lease.Charges = charges
		}
		if out, err = l.store.Charge(ctx, now, charges, lease); err != nil {
			return Decision{}, err
		}
		if out.Admitted {
			d := admitted(now, charges, out.States, lease)
			d.Shadow = append(shadowed, d.Shadow...)
			return d, nil
		}
	}
	if out.Admitted {
		d := admitted(now, charges, out.States, lease)
		recycle(pooled, charges, d)
		return d, nil
	}
	if !shardRefused(charges, out.States) {
		return refuse(now, charges, out.States, nil), nil
	}
	// Sharded counters refused: look at every shard once, for the exact
	// wait of the rule as a whole, and, when nothing else refused, to
	// place the charge where there is room, split over several shards if
	// it is larger than any one has.
	spread, err := l.readShards(ctx, now, charges, out.States)
	if err != nil {
		return Decision{}, err
	}
	if !onlyShardsRefused(charges, out.States) {
		return refuse(now, charges, out.States, spread), nil
	}
	placed, ok := spread.place(charges)
	if !ok {
		return refuse(now, charges, out.States, spread), nil
	}
	lease = renamed(lease, "~s")
	if lease != nil {
		lease.Charges = placed
	}
	out2, err := l.store.Charge(ctx, now, placed, lease)
	if err != nil {
		return Decision{}, err
	}
	if out2.Admitted {
		return admitted(now, placed, out2.States, lease), nil
	}
	return refuse(now, placed, out2.States, spread), nil
}

// chargeBufs hold the charges of admissions that kept none of them, for
// the next admission to plan in: a decision's one allocation that is not
// its store's. A Store uses the charges it is given only until its call
// returns (see Store.Charge); a lease keeps its own.
var chargeBufs = sync.Pool{New: func() any { return new([]Charge) }}

// recycle gives buf back to chargeBufs, holding charges when decision d
// keeps none of them: no lease holds them and no refusal points at one.
func recycle(buf *[]Charge, charges []Charge, d Decision) {
	*buf = nil
	if d.Lease == nil && d.Refused == nil && d.Shadow == nil {
		*buf = charges[:0]
	}
	chargeBufs.Put(buf)
}

// valid reports whether the request's amounts may be charged.
func (req *Request) valid() bool {
	return validAmount(req.InputTokens) && validAmount(req.OutputTokens) && req.OutputBurndown >= 0 && req.OutputBurndown <= MaxBurndown
}

func admitted(now time.Time, charges []Charge, states []State, lease *Lease) Decision {
	d := Decision{Allowed: true, Lease: lease}
	d.Requests, d.Tokens, d.Budget = quotas(now, charges, states)
	d.Shadow = shadowRefusals(now, charges, states, true)
	return d
}

// onlyShadowRefused reports whether the charges refused are all shadow
// rules' (gauges at the most one item holds).
func onlyShadowRefused(charges []Charge, states []State) bool {
	found := false
	for i, st := range states {
		if st.Refused {
			if !charges[i].shadow() {
				return false
			}
			found = true
		}
	}
	return found
}

// shadowRefusals lists the shadow rules that would have refused: whose
// counter, without this request (states hold it when admitted), is above
// the real ceiling.
func shadowRefusals(now time.Time, charges []Charge, states []State, admitted bool) []Refusal {
	var out []Refusal
	for i := range charges {
		c := &charges[i]
		if !c.shadow() {
			continue
		}
		st := states[i]
		if admitted && !st.Refused {
			st.Cur -= c.Amount
		}
		if st.Cur <= c.ceiling(st.Prev, now) && !st.Refused {
			continue
		}
		wait, ok := waitFor(now, c, st)
		ref := refusalOf(c, groupAmount(charges, i), wait, ok)
		if c.Counter.Kind == KindCost {
			ref.Spent, ref.Reserved, ref.ReservedOnly = budgetSplit(c, st)
		}
		out = append(out, ref)
	}
	return out
}

// renamed returns a copy of lease under a new id, for charging again after
// a refusal: a store may have recorded the refused lease under the old one.
func renamed(lease *Lease, suffix string) *Lease {
	if lease == nil {
		return nil
	}
	c := *lease
	c.ID = lease.ID + suffix
	if len(c.ID) > MaxLeaseIDLen {
		c.ID = c.ID[len(c.ID)-MaxLeaseIDLen:]
	}
	c.Charges = slices.Clone(lease.Charges)
	return &c
}

// Complete records what an admitted request used and gives back its
// in-flight slots. It is safe to call more than once.
func (l *Limiter) Complete(ctx context.Context, now time.Time, lease *Lease, used Usage) error {
	if lease == nil {
		return nil
	}
	return l.store.Complete(ctx, now, lease, used.Clamped())
}

// LeaseTTL is how long a lease holds its slots without renewal.
func (l *Limiter) LeaseTTL() time.Duration { return l.leaseTTL }

// InProcess reports whether the limiter's store keeps its state in this
// process (it says so with an InProcess method): a call to it never
// waits on a network, so it needs no deadline.
func (l *Limiter) InProcess() bool {
	s, ok := l.store.(interface{ InProcess() bool })
	return ok && s.InProcess()
}

// Renew extends a lease by LeaseTTL from now, for a request still running,
// and reports whether it still holds its slots.
func (l *Limiter) Renew(ctx context.Context, now time.Time, lease *Lease) (bool, error) {
	if lease == nil {
		return true, nil
	}
	until := now.Add(l.leaseTTL)
	ok, err := l.store.Renew(ctx, now, lease, until)
	if ok && err == nil {
		lease.ExpiresAt = until
	}
	return ok, err
}

// Usage reads the live counters of the rules that match s, for GET
// /v1/usage and the admin listing.
func (l *Limiter) Usage(ctx context.Context, now time.Time, s Subject) ([]RuleUsage, error) {
	var buf [16]match
	ms := l.rules.Load().appendMatches(buf[:0], s, false)
	return l.usage(ctx, now, ms)
}

// limitOf returns the rule's whole limit in a dimension.
func (r *rule) limitOf(k Kind) int64 { return r.Limit.limitOf(k) }

// setShard points c at shard k of n, with that shard's share of limit: the
// shares add up to the limit exactly.
func setShard(c *Charge, limit int64, k, n int) {
	if n == 1 {
		c.Counter.Shard, c.Counter.Shards, c.Limit = k, 0, limit
		return
	}
	c.Counter.Shard, c.Counter.Shards = k, layoutField(n)
	c.Limit = limit / int64(n)
	if int64(k) < limit%int64(n) {
		c.Limit++
	}
}

func shardRefused(charges []Charge, states []State) bool {
	for i, s := range states {
		if s.Refused && layoutOf(charges[i].Counter) > 1 {
			return true
		}
	}
	return false
}

func onlyShardsRefused(charges []Charge, states []State) bool {
	for i, s := range states {
		if s.Refused && layoutOf(charges[i].Counter) < 2 {
			return false
		}
	}
	return true
}

// waitFor returns how long until charge c would be admitted on a counter in
// state s if nothing else arrived.
func waitFor(now time.Time, c *Charge, s State) (time.Duration, bool) {
	switch {
	case c.IsGauge():
		return InFlightRetry, c.Amount <= c.Limit
	case c.Shape == ShapeBucket:
		return bucketWait(now, s.Cur, c.Limit, c.Amount)
	case c.Counter.Kind == KindCost:
		return budgetWait(now, c, s)
	case c.Shape == ShapeFixed:
		if c.Amount > c.Limit {
			return 0, false
		}
		if SatAdd(max(s.Cur, 0), c.Amount) <= c.Limit {
			return 0, true
		}
		return c.End.Sub(now), true // the next window starts empty
	}
	_, elapsed := windowAt(now, c.Period)
	return slidingWait(c.Limit, s.Prev, s.Cur, c.Amount, c.Period, elapsed)
}

// budgetWait is waitFor for a budget's charge c: none while it fits; when
// what refuses it is only reserved (budgetSplit), the time its
// reservations are expected settled; otherwise the period's end. A
// charge larger than the budget fits no period.
func budgetWait(now time.Time, c *Charge, s State) (time.Duration, bool) {
	if c.Amount > c.Limit {
		return 0, false
	}
	if SatAdd(max(s.Cur, 0), c.Amount) <= c.Limit {
		return 0, true
	}
	if _, _, only := budgetSplit(c, s); only && c.settleWait > 0 {
		return min(c.settleWait, max(c.End.Sub(now), 0)), true
	}
	return c.End.Sub(now), true
}

// budgetSplit splits what a budget's counter holds into what settled
// requests spent and what unsettled ones reserved, and reports whether
// the charge would fit once the reservations were gone: then the budget
// refuses for reservations only, which settle to what they really cost.
func budgetSplit(c *Charge, s State) (spent, reserved int64, reservedOnly bool) {
	cur := max(s.Cur, 0)
	reserved = min(max(s.Reserved, 0), cur)
	spent = cur - reserved
	return spent, reserved, reserved > 0 && SatAdd(spent, c.Amount) <= c.Limit
}

// refuse builds the Decision for a refused charge: the deciding rule is the
// refused one with the longest wait (a request larger than its limit waits
// forever), since the request is admitted only once every rule admits it.
// With sp, the waits of sharded rules are those of all their shards.
func refuse(now time.Time, charges []Charge, states []State, sp *spread) Decision {
	pick, wait, retryable := -1, time.Duration(0), false
	for i := range charges {
		if !states[i].Refused || charges[i].shadow() {
			continue
		}
		d, ok := waitOf(now, charges, i, states[i], sp)
		if pick < 0 || (retryable && (!ok || d > wait)) {
			pick, wait, retryable = i, d, ok
		}
	}
	d := Decision{}
	d.Requests, d.Tokens, d.Budget = quotas(now, charges, states)
	d.Shadow = shadowRefusals(now, charges, states, false)
	if pick < 0 {
		// A store that refuses must mark a refused charge; treat a bare
		// refusal as the first charge's.
		pick = 0
		wait, retryable = waitFor(now, &charges[0], states[0])
	}
	c := &charges[pick]
	r := c.owner
	refusal := refusalOf(c, groupAmount(charges, pick), wait, retryable)
	refusal.charge, refusal.state = c, states[pick]
	if c.Counter.Kind == KindCost {
		refusal.Spent, refusal.Reserved, refusal.ReservedOnly = budgetSplit(c, states[pick])
	}
	d.Refused = &refusal
	if c.Counter.Kind == KindCost {
		d.Budget = budgetQuotaOf(c, states[pick])
		return d
	}
	q := quotaOf(now, c, r, states[pick])
	if g := sp.group(c.Counter); g != nil {
		q.Remaining = g.room(now, 0)
	}
	if c.Counter.Kind == KindRequests || c.Counter.Kind == KindInFlight {
		q.Remaining = 0
		d.Requests = q
	} else {
		d.Tokens = q
	}
	return d
}

// refusalOf is the Refusal of charge c, which asked amount of its rule.
func refusalOf(c *Charge, amount int64, wait time.Duration, retryable bool) Refusal {
	if c.Shape == ShapeBucket {
		amount = c.units
	}
	return Refusal{
		Rule:       c.owner.Rule,
		Child:      c.Counter.Child,
		Kind:       c.Counter.Kind,
		Limit:      c.owner.limitOf(c.Counter.Kind),
		Amount:     amount,
		RetryAfter: wait,
		Retryable:  retryable,
		End:        c.End,
		Burndown:   c.Burndown,
	}
}

// waitOf is waitFor for charge i, over all shards when sp read them.
func waitOf(now time.Time, charges []Charge, i int, st State, sp *spread) (time.Duration, bool) {
	c := &charges[i]
	if g := sp.group(c.Counter); g != nil {
		return g.wait(now, groupAmount(charges, i))
	}
	return waitFor(now, c, st)
}

// groupAmount is what the request asks of charge i's rule and dimension:
// the sum of its parts when it is split over shards.
func groupAmount(charges []Charge, i int) int64 {
	var a int64
	for j := range charges {
		if samePart(charges[j].Counter, charges[i].Counter) {
			a = SatAdd(a, charges[j].Amount)
		}
	}
	return a
}

// quotas returns the most restrictive requests and tokens quotas among the
// charges, and the tightest budget. In-flight gauges speak for requests
// only when no request window matched. Shadow rules are not shown.
func quotas(now time.Time, charges []Charge, states []State) (req, tok Quota, budget BudgetQuota) {
	var fly Quota
	for i := range charges {
		c := &charges[i]
		if c.shadow() {
			continue
		}
		if c.Counter.Kind == KindCost {
			if b := budgetQuotaOf(c, states[i]); !budget.IsSet() || b.Remaining < budget.Remaining {
				budget = b
			}
			continue
		}
		q := quotaOf(now, c, c.owner, states[i])
		switch {
		case c.Counter.Kind == KindRequests:
			if q.tighter(req) {
				req = q
			}
		case c.Counter.Kind == KindInFlight:
			if q.tighter(fly) {
				fly = q
			}
		default:
			if q.tighter(tok) {
				tok = q
			}
		}
	}
	if !req.IsSet() {
		req = fly
	}
	return req, tok, budget
}

// budgetQuotaOf is what a budget's counter leaves.
func budgetQuotaOf(c *Charge, s State) BudgetQuota {
	return BudgetQuota{
		Rule:      c.owner.Rule,
		Child:     c.Counter.Child,
		Limit:     c.Limit,
		Remaining: max(0, c.Limit-max(s.Cur, 0)),
		Reset:     c.End,
	}
}

// quotaOf returns the x-ratelimit-* values of one counter. A sharded
// counter reports the rule's whole limit and its own remaining room scaled
// by the number of shards.
func quotaOf(now time.Time, c *Charge, r *rule, s State) Quota {
	q := Quota{Limit: r.limitOf(c.Counter.Kind)}
	switch {
	case c.IsGauge():
		q.Remaining = max(0, c.Limit-s.Cur)
	case c.Shape == ShapeBucket:
		debt := bucketDebt(now, s.Cur)
		q.Remaining = max(0, c.Limit-debt) / max(c.Unit, 1)
		q.Reset, q.HasReset = time.Duration(debt), true
	case c.Shape == ShapeFixed:
		q.Remaining = max(0, c.Limit-max(s.Cur, 0))
		if s.Cur > 0 {
			q.Reset = c.End.Sub(now)
		}
		q.HasReset = true
	default:
		elapsed := c.elapsed(now)
		q.Remaining = slidingRemaining(c.Limit, s.Prev, s.Cur, c.Period, elapsed)
		q.Reset = slidingReset(s.Prev, s.Cur, c.Period, elapsed)
		q.HasReset = true
	}
	if n := int64(layoutOf(c.Counter)); n > 1 {
		q.Remaining = min(q.Limit, SatMul(q.Remaining, n))
	}
	return q
}

// fnv hashes two strings with FNV-1a, without allocating.
func fnv(a, b string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(a); i++ {
		h = (h ^ uint64(a[i])) * 1099511628211
	}
	h = (h ^ 0xff) * 1099511628211
	for i := 0; i < len(b); i++ {
		h = (h ^ uint64(b[i])) * 1099511628211
	}
	return h
}
