package limiter

import (
	"context"
	"time"
)

// Explanation is what Admit would decide for a request now, and why, read
// from the store without charging anything.
type Explanation struct {
	// Decision is the decision Admit would return (with no lease):
	// Allowed, or Refused with its Retry-After, and the quotas.
	Decision Decision
	// Rules lists each matching rule's dimensions, in matching order, and
	// after them the rules a higher priority overrode.
	Rules []ExplainedRule
}

// ExplainedRule is one dimension of one matching rule.
type ExplainedRule struct {
	Rule  Rule
	Child string
	Kind  Kind
	Limit int64
	// Amount is what the request would charge.
	Amount int64
	// Burndown is the output burndown a QuotaBedrock token window charges
	// at: Amount is input + max output × Burndown (0 for the standard
	// arithmetic).
	Burndown int64
	// Used is what the counter holds now (a bucket: what its refill
	// lacks, in units); Remaining what the rule leaves.
	Used      int64
	Remaining int64
	// WouldRefuse says this dimension would refuse the request, with the
	// wait until it would not. A shadow rule would only report it.
	WouldRefuse bool
	RetryAfter  time.Duration
	Retryable   bool
	// Overridden is set for a rule that matches but that a rule of higher
	// priority in its scope overrides: it is not charged.
	Overridden bool
}

// Explain reads the state of every rule matching req and returns what
// Admit would decide at now. Nothing is charged and no lease is written;
// a sharded rule is read over all its shards, as Admit would on a
// refusal. Another request may of course change the answer a moment
// later.
func (l *Limiter) Explain(ctx context.Context, now time.Time, req Request) (Explanation, error) {
	if !req.valid() {
		return Explanation{}, ErrInvalidAmount
	}
	rs := l.rules.Load()
	all := rs.appendAll(nil, req.Subject, req.ConsumerOnly)
	kept := all
	var over []match
	if rs.prioritized {
		over = overridden(all)
		kept = keepPrioritized(append([]match(nil), all...))
	}
	charges, _ := l.plan(now, req, kept, nil)
	skipped, _ := l.plan(now, req, over, nil)
	reads := append(append([]Charge(nil), charges...), skipped...)
	var ex Explanation
	if len(reads) == 0 {
		ex.Decision.Allowed = true
		return ex, nil
	}
	states, err := l.store.Read(ctx, now, reads)
	if err != nil {
		return Explanation{}, err
	}
	for i := range reads {
		c := &reads[i]
		states[i].Refused = states[i].Cur > c.ceiling(states[i].Prev, now)
	}
	// Sharded counters: the rule refuses only when all its shards together
	// lack room, as Admit would find after reading them all.
	marked := make([]State, len(charges))
	for i := range charges {
		marked[i].Refused = layoutOf(charges[i].Counter) > 1
	}
	sp, err := l.readShards(ctx, now, charges, marked)
	if err != nil {
		return Explanation{}, err
	}
	for i := range charges {
		if g := sp.group(charges[i].Counter); g != nil {
			states[i].Refused = g.room(now, 0) < groupAmount(charges, i)
		}
	}
	refused := false
	for i := range charges {
		refused = refused || (states[i].Refused && !charges[i].shadow())
	}
	cs := states[:len(charges)]
	if refused {
		ex.Decision = refuse(now, charges, cs, sp)
	} else {
		ex.Decision = Decision{Allowed: true}
		ex.Decision.Requests, ex.Decision.Tokens, ex.Decision.Budget = quotas(now, charges, cs)
		ex.Decision.Shadow = shadowRefusals(now, charges, cs, false)
	}
	for i := range reads {
		c := &reads[i]
		if i > 0 && samePart(reads[i-1].Counter, c.Counter) {
			continue // one line per rule dimension, not per shard
		}
		ex.Rules = append(ex.Rules, explainedRule(now, c, charges, i, states[i], sp))
	}
	return ex, nil
}

// explainedRule is the line of read c, the i-th of the explanation's
// reads (those past charges are overridden rules'), in state st.
func explainedRule(now time.Time, c *Charge, charges []Charge, i int, st State, sp *spread) ExplainedRule {
	q := quotaOf(now, c, c.owner, st)
	e := ExplainedRule{
		Rule:        c.owner.Rule,
		Child:       c.Counter.Child,
		Kind:        c.Counter.Kind,
		Limit:       c.owner.limitOf(c.Counter.Kind),
		Amount:      c.Amount,
		Burndown:    c.Burndown,
		Used:        st.Cur,
		Remaining:   q.Remaining,
		WouldRefuse: st.Refused,
		Overridden:  i >= len(charges),
	}
	if !e.Overridden {
		e.Amount = groupAmount(charges, i)
	}
	switch {
	case c.Shape == ShapeBucket:
		e.Amount, e.Used = c.units, e.Limit-q.Remaining
	case c.Counter.Kind == KindCost:
		e.Remaining = budgetQuotaOf(c, st).Remaining
	}
	if g := sp.group(c.Counter); g != nil && !e.Overridden {
		e.Used, e.Remaining = 0, g.room(now, 0)
		for _, s := range g.states {
			e.Used += s.Cur
		}
	}
	if e.WouldRefuse {
		if e.Overridden {
			e.RetryAfter, e.Retryable = waitFor(now, c, st)
		} else {
			e.RetryAfter, e.Retryable = waitOf(now, charges, i, st, sp)
		}
	}
	return e
}
