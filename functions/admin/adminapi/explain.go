package adminapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers/pricing"
)

// explainInput is a POST /admin/explain body: a request as admission would
// see it at one target.
type explainInput struct {
	UserPath     string `json:"user_path"`
	Provider     string `json:"provider"`
	Model        string `json:"model"`
	Key          string `json:"key"`
	Tags         any    `json:"tags"` // "k=v,k2=v2" or {"k": "v"}
	InputTokens  int64  `json:"input_tokens"`
	MaxTokens    int64  `json:"max_tokens"`
	BatchRequest bool   `json:"batch"`
	// Route is the request's route ("chat", "messages", …; default chat),
	// whose learned reservation applies.
	Route string `json:"route"`
}

type explainDecision struct {
	Allowed      bool     `json:"allowed"`
	Status       int      `json:"status"`
	Type         string   `json:"type,omitempty"`
	Rule         string   `json:"rule,omitempty"`
	Message      string   `json:"message,omitempty"`
	RetryAfterMS *int64   `json:"retry_after_ms,omitempty"`
	Retryable    bool     `json:"retryable,omitempty"`
	Shadow       []string `json:"shadow_refusals,omitempty"`
}

type explainedRule struct {
	Rule         string `json:"rule"`
	Subject      string `json:"subject"`
	Dimension    string `json:"dimension"`
	Limit        string `json:"limit"`
	Asked        string `json:"asked"`
	Used         string `json:"used"`
	Remaining    string `json:"remaining"`
	WouldRefuse  bool   `json:"would_refuse"`
	RetryAfterMS *int64 `json:"retry_after_ms,omitempty"`
	Shadow       bool   `json:"shadow,omitempty"`
	Overridden   bool   `json:"overridden,omitempty"`
	Source       string `json:"source"`
	// Quota and Arithmetic show how a token window of Bedrock's quota
	// computed what it asks.
	Quota      string      `json:"quota,omitempty"`
	Arithmetic *arithmetic `json:"arithmetic,omitempty"`
}

// arithmetic is a Bedrock-quota charge, term by term.
type arithmetic struct {
	InputTokens     int64  `json:"input_tokens"`
	MaxOutputTokens int64  `json:"max_output_tokens"`
	OutputBurndown  int64  `json:"output_burndown"`
	Charge          string `json:"charge"`
	SettlesTo       string `json:"settles_to"`
}

type explainPrice struct {
	InputUSDPerMillion       string `json:"input_usd_per_million"`
	OutputUSDPerMillion      string `json:"output_usd_per_million"`
	CachedInputUSDPerMillion string `json:"cached_input_usd_per_million"`
	From                     string `json:"from"`
	ReservedUSD              string `json:"reserved_usd"`
}

// explain answers what admission would decide for a request, rule by rule,
// charging nothing.
func (h *Handler) explain(w http.ResponseWriter, r *http.Request) {
	var in explainInput
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return
	}
	if _, err := limiter.ParseUserPath(in.UserPath); err != nil {
		errs = append(errs, fieldError{Field: "user_path", Message: err.Error()})
	}
	if in.Model != "" && in.Provider == "" {
		errs = append(errs, fieldError{Field: "provider", Message: "a model is matched at a provider: give its instance name"})
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"input_tokens", in.InputTokens}, {"max_tokens", in.MaxTokens}} {
		if f.v < 0 || f.v > limiter.MaxAmount {
			errs = append(errs, fieldError{Field: f.name, Message: "a whole number from 0"})
		}
	}
	tags, err := tagsOf(in.Tags)
	if err != nil {
		errs = append(errs, fieldError{Field: "tags", Message: err.Error()})
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if err := h.cfg.Watcher.Load(r.Context()); err != nil {
		h.storeFailed(w, err)
		return
	}
	prices := h.cfg.Prices
	if prices == nil {
		prices = pricing.New(nil, nil)
	}
	price, from := prices.Lookup(in.Provider, in.Model)
	route := in.Route
	if route == "" {
		route = "chat"
	}
	var learned any
	outTokens := in.MaxTokens
	if h.cfg.Estimates != nil && in.Model != "" {
		if est, ok := h.cfg.Estimates.OutputEstimate(r.Context(), route, in.Model, in.Key); ok {
			reserve := max(est.P95, h.cfg.AdaptiveFloor)
			learned = map[string]any{"route": route, "output_tokens_p95": est.P95, "samples": est.Samples, "per_key": est.PerKey,
				"reserves_without_a_cap": reserve}
			if outTokens == 0 {
				outTokens = reserve
			}
		}
	}
	burndown := int64(1)
	if h.cfg.Burndown != nil && in.Provider != "" {
		burndown = min(max(h.cfg.Burndown(in.Provider, in.Model), 1), limiter.MaxBurndown)
	}
	req := limiter.Request{
		ID:             "explain",
		Subject:        limiter.Subject{UserPath: in.UserPath, Provider: in.Provider, Model: in.Model, Key: in.Key, Tags: tags},
		Route:          "explain",
		InputTokens:    in.InputTokens,
		OutputTokens:   outTokens,
		OutputBurndown: burndown,
		Price:          price,
		UserPathOnly:   in.BatchRequest,
	}
	ex, err := h.cfg.Limiter.Explain(r.Context(), h.cfg.Now(), req)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	out := map[string]any{
		"decision": decisionOf(ex.Decision),
		"rules":    explainedRules(ex.Rules, req),
		"price": explainPrice{
			InputUSDPerMillion:       limiter.FormatUSD(price.Input),
			OutputUSDPerMillion:      limiter.FormatUSD(price.Output),
			CachedInputUSDPerMillion: limiter.FormatUSD(price.CachedInput),
			From:                     string(from),
			ReservedUSD:              limiter.FormatUSD(price.Cost(limiter.Usage{InputTokens: in.InputTokens, OutputTokens: outTokens})),
		},
		"charged":          false,
		"learned_estimate": learned,
	}
	writeJSON(w, http.StatusOK, out)
}

func decisionOf(d limiter.Decision) explainDecision {
	out := explainDecision{Allowed: d.Allowed, Status: http.StatusOK}
	for i := range d.Shadow {
		out.Shadow = append(out.Shadow, refusalName(&d.Shadow[i]))
	}
	if r := d.Refused; r != nil {
		out.Status, out.Type, out.Rule, out.Message, out.Retryable = http.StatusTooManyRequests, "rate_limit_error", refusalName(r), r.Message(), r.Retryable
		if r.IsBudget() && !r.ReservedOnly {
			out.Type = "insufficient_quota" // spent: a reserved-only refusal is a retryable rate limit
		}
		if r.Retryable {
			ms := r.RetryAfter.Milliseconds()
			out.RetryAfterMS = &ms
		}
	}
	return out
}

// refusalName is the x-tollgate-rule header's name of a refusal.
func refusalName(r *limiter.Refusal) string {
	name := r.Rule.Scope.String() + ":" + r.Subject() + ":" + r.Rule.PeriodName()
	if r.Rule.IsBudget() {
		return "budget:" + name
	}
	return name
}

func explainedRules(rules []limiter.ExplainedRule, req limiter.Request) []explainedRule {
	out := []explainedRule{}
	for _, e := range rules {
		ref := limiter.Refusal{Rule: e.Rule, Child: e.Child}
		amount := func(v int64) string {
			if e.Kind == limiter.KindCost {
				return "$" + limiter.FormatUSD(v)
			}
			return itoa(v)
		}
		er := explainedRule{
			Rule: refusalName(&ref), Subject: ref.Subject(), Dimension: dimensionName(e.Kind),
			Limit: amount(e.Limit), Asked: amount(e.Amount), Used: amount(e.Used), Remaining: amount(e.Remaining),
			WouldRefuse: e.WouldRefuse, Shadow: e.Rule.Shadow, Overridden: e.Overridden, Source: e.Rule.Source.String(),
		}
		if e.WouldRefuse && e.Retryable {
			ms := e.RetryAfter.Milliseconds()
			er.RetryAfterMS = &ms
		}
		if e.Rule.Quota != limiter.QuotaStandard {
			er.Quota = e.Rule.Quota.String()
		}
		if e.Burndown > 0 {
			er.Arithmetic = &arithmetic{
				InputTokens: req.InputTokens, MaxOutputTokens: req.OutputTokens, OutputBurndown: e.Burndown,
				Charge: fmt.Sprintf("input + cache write + cache read + max output × burndown = %d + %d × %d = %d",
					req.InputTokens, req.OutputTokens, e.Burndown, e.Amount),
				SettlesTo: fmt.Sprintf("input + cache write + output × %d (cache reads and unused output given back)", e.Burndown),
			}
		}
		out = append(out, er)
	}
	return out
}

func dimensionName(k limiter.Kind) string {
	return map[limiter.Kind]string{
		limiter.KindRequests: "requests", limiter.KindTokens: "tokens", limiter.KindInputTokens: "input_tokens",
		limiter.KindOutputTokens: "output_tokens", limiter.KindInFlight: "in_flight", limiter.KindCost: "cost_usd",
	}[k]
}

// tagsOf reads tags given as "k=v,k2=v2" or as an object.
func tagsOf(v any) ([]limiter.Tag, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case string:
		return limiter.ParseTags(t)
	case map[string]any:
		var parts []string
		for k, val := range t {
			s, ok := val.(string)
			if !ok {
				return nil, errBadTags
			}
			parts = append(parts, k+"="+s)
		}
		return limiter.ParseTags(strings.Join(parts, ","))
	}
	return nil, errBadTags
}
