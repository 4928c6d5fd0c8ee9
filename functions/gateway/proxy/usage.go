package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// usageView is GET /v1/usage: the live counters of the rules that apply
// to the caller's user path, a per_child rule resolved to the caller's
// own child.
type usageView struct {
	UserPath   string         `json:"user_path"`
	RateLimits []ruleUsageDoc `json:"rate_limits"`
	Budgets    []budgetDoc    `json:"budgets"`
}

// budgetDoc is one budget's period: what is spent (settled), what
// requests not yet settled reserved, and what is left, in dollars.
type budgetDoc struct {
	Budget      string    `json:"budget"`
	Subject     string    `json:"subject"`
	Period      string    `json:"period"`
	LimitUSD    string    `json:"limit_usd"`
	SpentUSD    string    `json:"spent_usd"`
	ReservedUSD string    `json:"reserved_usd"`
	Remaining   string    `json:"remaining_usd"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Shadow      bool      `json:"shadow,omitempty"`
}

type ruleUsageDoc struct {
	Rule        string                  `json:"rule"`
	Subject     string                  `json:"subject"`
	Period      string                  `json:"period"`
	Dimensions  map[string]dimensionDoc `json:"usage"`
	WindowStart *time.Time              `json:"window_start,omitempty"`
	WindowEnd   *time.Time              `json:"window_end,omitempty"`
}

type dimensionDoc struct {
	Limit     int64 `json:"limit"`
	Used      int64 `json:"used"`
	Previous  int64 `json:"previous_window,omitempty"`
	Remaining int64 `json:"remaining"`
	// RefillMS is how long a bucket takes to be full again.
	RefillMS int64 `json:"refill_ms,omitempty"`
}

var dimensionNames = map[limiter.Kind]string{
	limiter.KindRequests: "requests", limiter.KindTokens: "tokens", limiter.KindInputTokens: "input_tokens",
	limiter.KindOutputTokens: "output_tokens", limiter.KindInFlight: "in_flight",
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request) {
	caller, ok := h.authenticate(w, r, providers.ProtocolOpenAI)
	if !ok {
		return
	}
	h.adm.Refresh(r.Context())
	now := h.cfg.Now()
	var us []limiter.RuleUsage
	err := h.adm.LimiterCall(r.Context(), func(ctx context.Context) (err error) {
		us, err = h.cfg.Limiter.Usage(ctx, now, limiter.Subject{UserPath: caller.UserPath, Key: caller.KeyID, Tags: caller.Tags})
		return err
	})
	if err != nil {
		writeError(w, providers.ProtocolOpenAI, apiError{status: http.StatusServiceUnavailable, typ: errTypeServer, code: errCodeServiceUnavailable,
			message: "the gateway cannot read its counters right now"}, 0)
		return
	}
	out := usageView{UserPath: caller.UserPath, RateLimits: []ruleUsageDoc{}, Budgets: []budgetDoc{}}
	for _, u := range us {
		ref := limiter.Refusal{Rule: u.Rule, Child: u.Child}
		if _, budget := u.Rule.Limit.(limiter.Budget); budget && len(u.Dimensions) == 1 {
			d := u.Dimensions[0]
			out.Budgets = append(out.Budgets, budgetDoc{
				Budget:      ruleName(&ref),
				Subject:     ref.Subject(),
				Period:      u.Rule.PeriodName(),
				LimitUSD:    limiter.FormatUSD(d.Limit),
				SpentUSD:    limiter.FormatUSD(max(0, d.Used-d.Reserved)),
				ReservedUSD: limiter.FormatUSD(d.Reserved),
				Remaining:   limiter.FormatUSD(d.Remaining),
				PeriodStart: u.WindowStart.UTC(),
				PeriodEnd:   u.WindowEnd.UTC(),
				Shadow:      u.Rule.Shadow,
			})
			continue
		}
		doc := ruleUsageDoc{
			Rule:       ruleName(&ref),
			Subject:    ref.Subject(),
			Period:     u.Rule.PeriodName(),
			Dimensions: map[string]dimensionDoc{},
		}
		if !u.WindowStart.IsZero() {
			s, e := u.WindowStart.UTC(), u.WindowEnd.UTC()
			doc.WindowStart, doc.WindowEnd = &s, &e
		}
		for _, d := range u.Dimensions {
			doc.Dimensions[dimensionNames[d.Kind]] = dimensionDoc{Limit: d.Limit, Used: d.Used, Previous: d.Previous, Remaining: d.Remaining,
				RefillMS: d.Refill.Milliseconds()}
		}
		out.RateLimits = append(out.RateLimits, doc)
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
