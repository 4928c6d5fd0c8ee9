package admission

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// Provider headers tune the governor, never replace it: the limits an
// upstream reports of its own (x-ratelimit-limit-*,
// anthropic-ratelimit-*-limit, and what remains) are recorded per
// provider and model for every instance, at most once per
// limiter.UpstreamReportEvery by the whole fleet (this instance does not
// even try more often); a configured provider or model rule above what
// the upstream enforces is warned about once; and with adapt: true the
// rule's effective limit follows the report downwards (the config
// store's Watcher applies it, see configstore.Watcher.Adapt).

// UpstreamRecorder records upstream reports; both stores do.
type UpstreamRecorder interface {
	RecordUpstream(ctx context.Context, key string, rep limiter.UpstreamReport, every time.Duration) (bool, error)
}

// upstreamNotes is what this instance remembers of upstream reports:
// when it last recorded each provider's model, and which rules it warned
// about at which reported limit.
type upstreamNotes struct {
	recorded *lru.Cache[string, time.Time]
	mu       sync.Mutex
	warned   map[string]bool
}

// maxWarnings bounds the warnings remembered (a rule and a reported
// limit each).
const maxWarnings = 4096

// noteUpstream records what target t's upstream reported of its limits,
// and warns about the configured rules above them.
func (o *Orchestrator) noteUpstream(ctx context.Context, t providers.Target, l providers.UpstreamLimits) {
	if o.cfg.Upstream == nil || !l.ReportsLimits() {
		return
	}
	key, now := CooldownKey(t), o.cfg.Now()
	if last, ok := o.upstream.recorded.Get(key); ok && now.Sub(last) < limiter.UpstreamReportEvery && !now.Before(last) {
		return
	}
	o.upstream.recorded.Put(key, now)
	rep := limiter.UpstreamReport{LimitRequests: l.LimitRequests, LimitTokens: l.LimitTokens,
		RemainingRequests: l.RemainingRequests, RemainingTokens: l.RemainingTokens, At: now}
	sctx, cancel := o.StoreContext(ctx)
	defer cancel()
	// The model's, and its provider's (the latest of any of its models),
	// which a provider rule follows.
	for _, k := range []string{key, ProviderKey(t)} {
		if _, err := o.cfg.Upstream.RecordUpstream(sctx, k, rep, limiter.UpstreamReportEvery); err != nil {
			o.log.Warn("could not record what an upstream reports of its limits", "provider", t.Provider.Name(), "target_model", t.Model, "err", err)
			break
		}
	}
	o.warnAbove(t, rep)
}

// warnAbove logs, once per rule and reported limit, a configured rule of
// target t that allows more than its upstream reports it enforces.
func (o *Orchestrator) warnAbove(t providers.Target, rep limiter.UpstreamReport) {
	for _, r := range o.cfg.Limiter.Rules().List() {
		if !r.ReportedFor(t.Provider.Name(), t.Model) {
			continue
		}
		above := r.AboveReport(rep)
		if len(above) == 0 {
			continue
		}
		id := r.ID() + "|" + strconv.FormatInt(rep.LimitRequests, 10) + "|" + strconv.FormatInt(rep.LimitTokens, 10)
		o.upstream.mu.Lock()
		seen := o.upstream.warned[id]
		if !seen && len(o.upstream.warned) < maxWarnings {
			o.upstream.warned[id] = true
		}
		o.upstream.mu.Unlock()
		if seen {
			continue
		}
		o.log.Warn("a configured rule allows more than the upstream reports it enforces: the upstream will answer 429 first",
			"rule", r.ID(), "provider", t.Provider.Name(), "target_model", t.Model, "above", above,
			"configured_requests", r.MaxRequests, "reported_requests", rep.LimitRequests,
			"configured_tokens", r.MaxTokens, "reported_tokens", rep.LimitTokens, "adapt", "set adapt: true on the rule to follow it")
	}
}
