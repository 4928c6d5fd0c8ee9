package admission

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// A downgrade is an admission outcome of its own: a request of an
// opted-in class that a rule or budget of the model it goes to (From)
// would refuse, or whose tightest budget there is below a fraction, is
// admitted on a cheaper model (To) instead, when To is compatible with
// the request and has room. The answer says so
// (x-tollgate-downgraded-from) and metrics count it.

// Downgrade is one downgrade rule.
type Downgrade struct {
	// From and To are "provider/model".
	From, To string
	// Refused downgrades a request From would refuse; BudgetBelow (a
	// fraction, 0 for none) one whose tightest budget at From has less
	// than that fraction of its limit left.
	Refused     bool
	BudgetBelow float64
	// Classes are the classes that opt in.
	Classes []string
}

// downgradeAt returns the downgrade of target t that the request's class
// opts into, with its target, if any.
func (a *Admission) downgradeAt(t providers.Target) (*Downgrade, providers.Target, bool) {
	class := a.req.Caller.Class
	if class == "" {
		return nil, providers.Target{}, false // a request of no class opts into nothing
	}
	lists := [2][]Downgrade{a.o.cfg.Downgrades}
	if a.o.cfg.ManagedDowngrades != nil {
		lists[1] = a.o.cfg.ManagedDowngrades()
	}
	from := ""
	for _, list := range lists {
		for i := range list {
			d := &list[i]
			if !slices.Contains(d.Classes, class) {
				continue
			}
			if from == "" {
				from = t.String()
			}
			if !strings.EqualFold(d.From, from) {
				continue
			}
			route, ok := a.o.cfg.Catalog.Resolve(d.To)
			if !ok || len(route.Targets) == 0 {
				continue
			}
			return d, route.Targets[0], true
		}
	}
	return nil, providers.Target{}, false
}

// offerDowngrade puts the downgrade of target t next in the pass, when
// the request opts into one and why allows it (refused: t refused it).
// It reports whether it did.
func (a *Admission) offerDowngrade(t providers.Target, refused bool) bool {
	d, to, ok := a.downgradeAt(t)
	if !ok || (refused && !d.Refused) || slices.Contains(a.targets[a.next:], to) || a.downgradedFrom[to] != "" {
		return false
	}
	a.targets = slices.Insert(slices.Clone(a.targets), a.next, to)
	if a.downgradedFrom == nil {
		a.downgradedFrom = map[providers.Target]string{}
	}
	a.downgradedFrom[to] = t.String()
	return true
}

// budgetLow reports whether the request opts into a downgrade of target
// t by budget whose tightest budget at t is below the fraction: read, not
// charged, so that the request is first tried at the downgrade's target.
func (a *Admission) budgetLow(ctx context.Context, now time.Time, t providers.Target, lr limiter.Request) bool {
	d, _, ok := a.downgradeAt(t)
	if !ok || d.BudgetBelow <= 0 || a.downgradedFrom[t] != "" {
		return false
	}
	var ex limiter.Explanation
	if err := a.o.LimiterCall(ctx, func(ctx context.Context) (err error) {
		ex, err = a.o.cfg.Limiter.Explain(ctx, now, lr)
		return err
	}); err != nil {
		return false
	}
	b := ex.Decision.Budget
	return ex.Decision.Allowed && b.IsSet() && float64(b.Remaining) < d.BudgetBelow*float64(b.Limit)
}

// downgraded counts and logs a request admitted on a downgrade's target.
func (a *Admission) downgraded(t providers.Target, from string) {
	if a.dry {
		return
	}
	a.o.cfg.Metrics.Count(metrics.Downgraded, 1, "From", from, "To", t.String())
	a.logf("downgraded: admitted on a cheaper model the class opts into", "from", from, "to", t.String())
	if a.o.cfg.Observer != nil {
		a.o.cfg.Observer.Outcome(metrics.Outcome{Kind: metrics.OutcomeDowngraded, Class: a.req.Caller.Class, Model: t.Model, Provider: t.Provider.Name()})
	}
}
