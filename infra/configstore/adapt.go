package configstore

import (
	"context"
	"maps"
	"strings"

	"github.com/tollgate/tollgate/limiter"
)

// A provider or model rule with adapt: true follows what its upstream
// reports it enforces, downwards: its effective limit is the lower of the
// configured one and the reported one, never above what is configured.
// The reports are read with the rules, every Interval, by every instance
// (one read of the adapted rules' reports), and a change rebuilds the
// rules in force.

// UpstreamReader reads upstream reports; both limit stores do.
type UpstreamReader interface {
	UpstreamReports(ctx context.Context, keys []string) (map[string]limiter.UpstreamReport, error)
}

// Adapt makes the rules of keys follow their upstreams' reports, read
// from r.
func (w *Watcher) Adapt(keys []limiter.RuleKey, r UpstreamReader) {
	w.adaptKeys, w.reports = keys, r
}

// reportKeyOf is the report a rule follows: its provider's (the latest
// of any of its models), or its provider's model; "" for a model rule
// that names no provider, whose upstream is not one.
func reportKeyOf(r limiter.Rule) string {
	switch r.Scope {
	case limiter.ScopeProvider:
		return strings.ToLower(r.Subject) + "/*"
	case limiter.ScopeModel:
		if strings.Contains(r.Subject, "/") {
			return strings.ToLower(r.Subject)
		}
	}
	return ""
}

// readReports reads the reports the adapted rules follow, and reports
// whether they changed what is in force.
func (w *Watcher) readReports(ctx context.Context) bool {
	if w.reports == nil || len(w.adaptKeys) == 0 {
		return false
	}
	var keys []string
	for _, k := range w.adaptKeys {
		if r, ok := w.ruleOf(k); ok {
			if rk := reportKeyOf(r); rk != "" {
				keys = append(keys, rk)
			}
		}
	}
	got, err := w.reports.UpstreamReports(ctx, keys)
	if err != nil {
		w.log.Warn("could not read what upstreams report of their limits; adapted rules keep their limits", "err", err)
		return false
	}
	limits := map[string]limiter.UpstreamReport{}
	for k, rep := range got {
		limits[k] = limiter.UpstreamReport{LimitRequests: rep.LimitRequests, LimitTokens: rep.LimitTokens}
	}
	old := w.adapted.Load()
	if old != nil && maps.Equal(*old, limits) {
		return false
	}
	w.adapted.Store(&limits)
	return true
}

// ruleOf returns the configured rule of key k.
func (w *Watcher) ruleOf(k limiter.RuleKey) (limiter.Rule, bool) {
	for _, r := range w.config {
		if r.Key() == k {
			return r, true
		}
	}
	return limiter.Rule{}, false
}

// adaptRules lowers the adapted rules among merged to their reports.
func (w *Watcher) adaptRules(merged []limiter.Rule) {
	reps := w.adapted.Load()
	if reps == nil {
		return
	}
	for i := range merged {
		r := &merged[i]
		if !w.adapts(r.Key()) {
			continue
		}
		if rep, ok := (*reps)[reportKeyOf(*r)]; ok {
			adapted := r.Adapted(rep)
			if adapted.MaxRequests != r.MaxRequests || adapted.MaxTokens != r.MaxTokens {
				w.log.Info("rule adapted to what its upstream reports", "rule", r.ID(),
					"requests", adapted.MaxRequests, "tokens", adapted.MaxTokens, "configured_requests", r.MaxRequests, "configured_tokens", r.MaxTokens)
			}
			*r = adapted
		}
	}
}

func (w *Watcher) adapts(k limiter.RuleKey) bool {
	for _, a := range w.adaptKeys {
		if a == k {
			return true
		}
	}
	return false
}
