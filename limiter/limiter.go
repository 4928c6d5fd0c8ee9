package limiter

import (
	"context"
	"errors"
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
}

// Limiter decides admissions against a rule set and a Store. It is safe for
// concurrent use; the rule set can be swapped while requests are decided.
type Limiter struct {
	store    Store
	rules    atomic.Pointer[Rules]
	leaseTTL time.Duration
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
	l := &Limiter{store: cfg.Store, leaseTTL: cfg.LeaseTTL}
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
	// UserPathOnly admits by user-path rules only, as one request holding no
	// slot and reserving no tokens: a batch submission, whose file may mix
	// models and whose usage arrives much later.
	UserPathOnly bool
}

// Admit decides whether req may go at now. Every matching rule is charged
// all-or-nothing: request windows by one, token windows by the reservation,
// in-flight gauges by one slot held by the returned lease. A refusal is a
// Decision, not an error; the error is the store's.
func (l *Limiter) Admit(ctx context.Context, now time.Time, req Request) (Decision, error) {
	var buf [16]match
	ms := l.rules.Load().appendMatches(buf[:0], req.Subject, req.UserPathOnly)
	if len(ms) == 0 {
		return Decision{Allowed: true}, nil
	}
	charges, lease := l.plan(now, req, ms)
	out, err := l.store.Charge(ctx, now, charges, lease)
	if err != nil {
		return Decision{}, err
	}
	if out.Admitted {
		d := Decision{Allowed: true, Lease: lease}
		d.Requests, d.Tokens = quotas(now, charges, out.States)
		return d, nil
	}
	// A refusal that only sharded counters caused may fit on another
	// shard: try each shard once before refusing, keeping the shortest wait
	// seen per charge.
	waits := make([]wait, len(charges))
	record(now, charges, out.States, waits)
	for attempt := 1; attempt < maxShards(charges, out.States); attempt++ {
		if !onlyShardsRefused(charges, out.States) {
			break
		}
		nextShards(charges, out.States)
		if out, err = l.store.Charge(ctx, now, charges, lease); err != nil {
			return Decision{}, err
		}
		if out.Admitted {
			d := Decision{Allowed: true, Lease: lease}
			d.Requests, d.Tokens = quotas(now, charges, out.States)
			return d, nil
		}
		record(now, charges, out.States, waits)
	}
	return refuse(now, charges, out.States, waits), nil
}

// Complete records what an admitted request used and gives back its
// in-flight slots. It is safe to call more than once.
func (l *Limiter) Complete(ctx context.Context, now time.Time, lease *Lease, used Usage) error {
	if lease == nil {
		return nil
	}
	return l.store.Complete(ctx, now, lease.ID, used)
}

// Usage reads the live counters of the rules that match s, for GET
// /v1/usage and the admin listing.
func (l *Limiter) Usage(ctx context.Context, now time.Time, s Subject) ([]RuleUsage, error) {
	var buf [16]match
	ms := l.rules.Load().appendMatches(buf[:0], s, false)
	return l.usage(ctx, now, ms)
}

// plan turns matched rules into charges.
func (l *Limiter) plan(now time.Time, req Request, ms []match) ([]Charge, *Lease) {
	n := 0
	for _, m := range ms {
		n += m.rule.dimensions()
	}
	charges := make([]Charge, 0, n)
	var inFlight, tokens bool
	add := func(m match, kind Kind, limit, amount int64) {
		if limit <= 0 {
			return
		}
		r := m.rule
		c := Charge{
			Counter: Counter{Rule: r.counter, Child: m.child, Kind: kind},
			Period:  r.Period,
			Limit:   limit,
			Amount:  amount,
		}
		if r.Period != Concurrent {
			c.Counter.Window, _ = windowAt(now, r.Period)
		}
		if n := r.shards(); n > 1 {
			setShard(&c, limit, int(fnv(req.ID, r.counter)%uint64(n)), n)
		}
		c.owner = r
		charges = append(charges, c)
	}
	for _, m := range ms {
		r := m.rule
		if r.Period == Concurrent {
			if !req.UserPathOnly && r.MaxRequests > 0 {
				add(m, KindInFlight, r.MaxRequests, 1)
				inFlight = true
			}
			continue
		}
		add(m, KindRequests, r.MaxRequests, 1)
		add(m, KindTokens, r.MaxTokens, req.InputTokens+req.OutputTokens)
		add(m, KindInputTokens, r.MaxInputTokens, req.InputTokens)
		add(m, KindOutputTokens, r.MaxOutputTokens, req.OutputTokens)
		tokens = tokens || r.MaxTokens > 0 || r.MaxInputTokens > 0 || r.MaxOutputTokens > 0
	}
	if !inFlight && (!tokens || req.UserPathOnly) {
		return charges, nil
	}
	return charges, &Lease{
		ID:        req.ID,
		ExpiresAt: now.Add(l.leaseTTL),
		UserPath:  req.UserPath,
		Provider:  req.Provider,
		Model:     req.Model,
		Route:     req.Route,
		Reserved:  Usage{InputTokens: req.InputTokens, OutputTokens: req.OutputTokens},
		Charges:   charges,
	}
}

func (r *rule) dimensions() int {
	n := 0
	for _, v := range [...]int64{r.MaxRequests, r.MaxTokens, r.MaxInputTokens, r.MaxOutputTokens} {
		if v > 0 {
			n++
		}
	}
	return n
}

func (r *rule) shards() int { return max(r.Shards, 1) }

// limitOf returns the rule's whole limit in a dimension.
func (r *rule) limitOf(k Kind) int64 {
	switch k {
	case KindTokens:
		return r.MaxTokens
	case KindInputTokens:
		return r.MaxInputTokens
	case KindOutputTokens:
		return r.MaxOutputTokens
	}
	return r.MaxRequests
}

// setShard points c at shard k of n, with that shard's share of limit: the
// shares add up to the limit exactly.
func setShard(c *Charge, limit int64, k, n int) {
	c.Counter.Shard = k
	c.Limit = limit / int64(n)
	if int64(k) < limit%int64(n) {
		c.Limit++
	}
}

func maxShards(charges []Charge, states []State) int {
	n := 1
	for i, s := range states {
		if s.Refused {
			n = max(n, charges[i].owner.shards())
		}
	}
	return n
}

func onlyShardsRefused(charges []Charge, states []State) bool {
	for i, s := range states {
		if s.Refused && charges[i].owner.shards() < 2 {
			return false
		}
	}
	return true
}

func nextShards(charges []Charge, states []State) {
	for i, s := range states {
		if s.Refused {
			r := charges[i].owner
			n := r.shards()
			setShard(&charges[i], r.limitOf(charges[i].Counter.Kind), (charges[i].Counter.Shard+1)%n, n)
		}
	}
}

// wait is the shortest wait seen for one charge across shard attempts.
type wait struct {
	seen      bool
	d         time.Duration
	retryable bool
}

func record(now time.Time, charges []Charge, states []State, waits []wait) {
	for i, s := range states {
		if !s.Refused {
			continue
		}
		d, ok := waitFor(now, &charges[i], s)
		w := &waits[i]
		if !w.seen || (ok && (!w.retryable || d < w.d)) {
			*w = wait{seen: true, d: d, retryable: ok}
		}
	}
}

// waitFor returns how long until charge c would be admitted on a counter in
// state s if nothing else arrived.
func waitFor(now time.Time, c *Charge, s State) (time.Duration, bool) {
	if c.Period == Concurrent {
		return InFlightRetry, c.Amount <= c.Limit
	}
	_, elapsed := windowAt(now, c.Period)
	return slidingWait(c.Limit, s.Prev, s.Cur, c.Amount, c.Period, elapsed)
}

// refuse builds the Decision for a refused charge: the deciding rule is the
// refused one with the longest wait (a request larger than its limit waits
// forever), since the request is admitted only once every rule admits it.
func refuse(now time.Time, charges []Charge, states []State, waits []wait) Decision {
	pick := -1
	for i, w := range waits {
		if !w.seen {
			continue
		}
		if pick < 0 {
			pick = i
			continue
		}
		p := waits[pick]
		if p.retryable && (!w.retryable || w.d > p.d) {
			pick = i
		}
	}
	d := Decision{}
	d.Requests, d.Tokens = quotas(now, charges, states)
	if pick < 0 {
		// A store that refuses must mark a refused charge; treat a bare
		// refusal as the first charge's.
		pick = 0
		waits[0].d, waits[0].retryable = waitFor(now, &charges[0], states[0])
	}
	c := &charges[pick]
	r := c.owner
	d.Refused = &Refusal{
		Rule:       r.Rule,
		Child:      c.Counter.Child,
		Kind:       c.Counter.Kind,
		Limit:      r.limitOf(c.Counter.Kind),
		Amount:     c.Amount,
		RetryAfter: waits[pick].d,
		Retryable:  waits[pick].retryable,
	}
	q := quotaOf(now, c, r, states[pick])
	if c.Counter.Kind == KindRequests || c.Counter.Kind == KindInFlight {
		q.Remaining = 0
		d.Requests = q
	} else {
		d.Tokens = q
	}
	return d
}

// quotas returns the most restrictive requests and tokens quotas among the
// charges. In-flight gauges speak for requests only when no request window
// matched.
func quotas(now time.Time, charges []Charge, states []State) (req, tok Quota) {
	var fly Quota
	for i := range charges {
		c := &charges[i]
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
	return req, tok
}

// quotaOf returns the x-ratelimit-* values of one counter. A sharded
// counter reports the rule's whole limit and its own remaining room scaled
// by the number of shards.
func quotaOf(now time.Time, c *Charge, r *rule, s State) Quota {
	q := Quota{Limit: r.limitOf(c.Counter.Kind)}
	if c.Period == Concurrent {
		q.Remaining = max(0, c.Limit-s.Cur)
	} else {
		_, elapsed := windowAt(now, c.Period)
		q.Remaining = slidingRemaining(c.Limit, s.Prev, s.Cur, c.Period, elapsed)
		q.Reset = slidingReset(s.Prev, s.Cur, c.Period, elapsed)
		q.HasReset = true
	}
	if n := int64(r.shards()); n > 1 {
		q.Remaining = min(q.Limit, q.Remaining*n)
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
