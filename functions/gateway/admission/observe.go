package admission

import (
	"context"
	"log/slog"

	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// What a request's admission decides is logged (one line per decision
// worth explaining), counted in metrics and observed for the dashboard,
// except in a dry run, which decides nothing.

// logf logs an Info line of the request's admission.
func (a *Admission) logf(msg string, args ...any) {
	if a.dry {
		return
	}
	a.o.log.Info(msg, append([]any{"request_id", a.id, "user_path", a.req.Caller.UserPath}, args...)...)
}

func ruleName(r *limiter.Refusal) string { return r.Rule.ID() }

// refusedByPause logs and counts a pause's refusal at target t.
func (a *Admission) refusedByPause(t providers.Target, p limiter.Pause) {
	if a.dry {
		return
	}
	a.o.cfg.Metrics.Count(metrics.Refused, 1, "Rule", p.ID(), "Reason", "paused")
	a.logf("refused: paused", "provider", t.Provider.Name(), "target_model", t.Model, "pause", p.ID(),
		"reason", p.Reason, "next_target", !p.Consumer())
}

// admitted counts an admission at target t, and the limits it leaves
// nearly spent.
func (a *Admission) admitted(t providers.Target, d limiter.Decision) {
	if a.dry {
		return
	}
	m, route := a.o.cfg.Metrics, a.req.Op.String()
	m.Count(metrics.Admitted, 1, "Route", route, "Provider", t.Provider.Name())
	for _, q := range []struct {
		dim string
		q   limiter.Quota
	}{{"requests", d.Requests}, {"tokens", d.Tokens}} {
		if q.q.IsSet() && q.q.Remaining*5 <= q.q.Limit {
			m.Count(metrics.NearLimit, 1, "Route", route, "Dimension", q.dim)
		}
	}
}

// logShadow logs and counts the refusals shadow rules would have made.
func (a *Admission) logShadow(t providers.Target, d limiter.Decision) {
	if a.dry {
		return
	}
	for i := range d.Shadow {
		r := &d.Shadow[i]
		a.o.shadowRefusals.Add(1)
		a.logf("shadow rule would have refused",
			"provider", t.Provider.Name(),
			"target_model", t.Model,
			"rule", ruleName(r),
			"dimension", r.Kind.String(),
			"limit", r.Limit,
			"asked", r.Amount,
			"retry_after_ms", r.RetryAfter.Milliseconds(),
			"admitted", d.Allowed,
		)
	}
}

// logRefusal logs, counts and observes a rule's refusal at target t.
func (a *Admission) logRefusal(t providers.Target, d limiter.Decision) {
	if a.dry {
		return
	}
	r := d.Refused
	reason := "rate_limit"
	if r.IsBudget() {
		reason = "budget"
	}
	a.o.cfg.Metrics.Count(metrics.Refused, 1, "Rule", ruleName(r), "Reason", reason)
	a.observeRefusal(t, r)
	a.o.log.LogAttrs(context.Background(), slog.LevelInfo, "refused",
		slog.String("request_id", a.id),
		slog.String("user_path", a.req.Caller.UserPath),
		slog.String("route", a.req.Op.String()),
		slog.String("model", a.req.Model),
		slog.String("provider", t.Provider.Name()),
		slog.String("target_model", t.Model),
		slog.String("rule", ruleName(r)),
		slog.String("dimension", r.Kind.String()),
		slog.Int64("limit", r.Limit),
		slog.Int64("asked", r.Amount),
		slog.Int64("retry_after_ms", r.RetryAfter.Milliseconds()),
		slog.Bool("retryable", r.Retryable),
		slog.Bool("next_target", !consumerScope(r.Scope())),
	)
}

// observeRefusal counts a rule's refusal of a request at target t.
func (a *Admission) observeRefusal(t providers.Target, r *limiter.Refusal) {
	if a.o.cfg.Observer == nil {
		return
	}
	a.o.cfg.Observer.Outcome(metrics.Outcome{
		Kind: metrics.OutcomeRefused, Class: a.req.Caller.Class, Model: t.Model, Provider: t.Provider.Name(),
		Rule: r.Rule.ID(), ProviderRule: r.Scope() == limiter.ScopeProvider || r.Scope() == limiter.ScopeModel,
		RetryAfter: r.RetryAfter, HasRetryAfter: r.Retryable,
	})
}

// observeWait counts a request that waits out a refusal.
func (a *Admission) observeWait() {
	if a.o.cfg.Observer != nil {
		a.o.cfg.Observer.Outcome(metrics.Outcome{Kind: metrics.OutcomeWaited, Class: a.req.Caller.Class, Model: a.req.Model})
	}
}

// observeUpstream429 counts a provider's 429 after admission.
func (a *Admission) observeUpstream429(t providers.Target, e *providers.Error) {
	if a.o.cfg.Observer != nil {
		a.o.cfg.Observer.Outcome(metrics.Outcome{Kind: metrics.OutcomeUpstream429, Class: a.req.Caller.Class, Model: t.Model,
			Provider: t.Provider.Name(), RetryAfter: e.Limits.RetryAfter, HasRetryAfter: e.Limits.RetryAfter > 0})
	}
}

// fellBack counts a request admitted on a target other than its first
// choice.
func (a *Admission) fellBack(t providers.Target) {
	if a.dry {
		return
	}
	a.o.cfg.Metrics.Count(metrics.FellBack, 1, "From", a.first.String(), "To", t.String())
	if a.o.cfg.Observer != nil {
		a.o.cfg.Observer.Outcome(metrics.Outcome{Kind: metrics.OutcomeFallback, Class: a.req.Caller.Class, Model: t.Model, Provider: t.Provider.Name()})
	}
}
