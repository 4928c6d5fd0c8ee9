package limiter

import (
	"strings"
	"time"
)

// UpstreamReport is what an upstream last reported of its own limits for
// one provider's model (OpenAI's and Azure's x-ratelimit-limit-*,
// Anthropic's anthropic-ratelimit-*-limit, and what remains), as recorded
// for every gateway instance. The limits are per minute; 0 is not
// reported, and so is a remainder of -1.
type UpstreamReport struct {
	LimitRequests, LimitTokens         int64
	RemainingRequests, RemainingTokens int64
	At                                 time.Time
}

// UpstreamReportEvery is how often at most a report of one provider's
// model is written, whatever the number of instances.
const UpstreamReportEvery = 5 * time.Second

// ReportedFor reports whether rule r limits one provider's model the way
// an upstream report of it does: a provider rule on the provider, or a
// model rule on the model (at that provider, or on any), counting a
// window of one minute, the period the upstreams report.
func (r Rule) ReportedFor(provider, model string) bool {
	if r.Bucket != nil || r.IsBudget() || r.Period != Minute || r.PerChild {
		return false
	}
	switch r.Scope {
	case ScopeProvider:
		return strings.EqualFold(r.Subject, provider)
	case ScopeModel:
		return strings.EqualFold(r.Subject, provider+"/"+model) || strings.EqualFold(r.Subject, model)
	}
	return false
}

// AboveReport names the dimensions ("requests", "tokens") in which rule
// r, a rule ReportedFor the report's model, allows more than the upstream
// reports it enforces.
func (r Rule) AboveReport(rep UpstreamReport) []string {
	var out []string
	if rep.LimitRequests > 0 && r.MaxRequests > rep.LimitRequests {
		out = append(out, "requests")
	}
	if rep.LimitTokens > 0 && r.MaxTokens > rep.LimitTokens {
		out = append(out, "tokens")
	}
	return out
}

// Adapted returns rule r with its limits lowered to what the upstream
// reports it enforces, never raised above what r configures.
func (r Rule) Adapted(rep UpstreamReport) Rule {
	if rep.LimitRequests > 0 && r.MaxRequests > rep.LimitRequests {
		r.MaxRequests = rep.LimitRequests
	}
	if rep.LimitTokens > 0 && r.MaxTokens > rep.LimitTokens {
		r.MaxTokens = rep.LimitTokens
	}
	return r
}
