package proxy

import (
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// observeCompletion counts what a completed request used: by user path,
// the prompt cache's headroom, and for each rule whose tokens or money
// the lease reserved, that reservation against the use (what the
// settlement will correct).
func (h *Handler) observeCompletion(ex *exchange, t providers.Target, lease *limiter.Lease, used limiter.Usage) {
	if h.cfg.Observer == nil {
		return
	}
	used = used.Clamped()
	c := metrics.Completion{UserPath: ex.caller.UserPath, Provider: t.Provider.Name(),
		InputTokens: used.InputTokens, OutputTokens: used.OutputTokens, Exact: used.Exact}
	if !used.CachedInInput {
		c.CacheHeadroom = used.CachedInputTokens // counted apart from the input that limits count
	}
	if lease != nil {
		c.Rules, c.Members = ruleUses(lease, used)
	}
	h.cfg.Observer.Completed(c)
}

// ruleUses is, per rule and settled dimension a lease charged, what it
// reserved (the shards of a split charge added up) and what was used; and
// what each fair-share member was charged.
func ruleUses(lease *limiter.Lease, used limiter.Usage) ([]metrics.RuleUse, []metrics.MemberUse) {
	type key struct {
		rule string
		kind limiter.Kind
	}
	var out []metrics.RuleUse
	var members []metrics.MemberUse
	at := map[key]int{}
	for i := range lease.Charges {
		ch := &lease.Charges[i]
		rule, ok := ch.Owner()
		if !ok {
			continue
		}
		units := ch.Amount
		if ch.Shape == limiter.ShapeBucket && ch.Unit > 0 {
			units /= ch.Unit
		}
		if m, isMember := ch.Member(); isMember {
			members = append(members, metrics.MemberUse{Rule: rule.ID(), Member: m, Units: units})
			continue
		}
		var dim string
		var u int64
		switch ch.Counter.Kind {
		case limiter.KindTokens:
			dim, u = "tokens", used.Total()
		case limiter.KindInputTokens:
			dim, u = "input_tokens", used.InputTokens
		case limiter.KindOutputTokens:
			dim, u = "output_tokens", used.OutputTokens
		case limiter.KindCost:
			dim, u = "usd", lease.Price.Cost(used)
		default:
			continue
		}
		k := key{rule.ID(), ch.Counter.Kind}
		if j, seen := at[k]; seen {
			out[j].Reserved = limiter.SatAdd(out[j].Reserved, units)
			continue
		}
		at[k] = len(out)
		out = append(out, metrics.RuleUse{Rule: k.rule, Dimension: dim, Reserved: units, Used: u})
	}
	return out, members
}
