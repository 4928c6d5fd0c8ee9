package proxy

import (
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
	now := h.cfg.Now()
	if h.cfg.Refresh != nil {
		h.cfg.Refresh(r.Context(), now)
	}
	us, err := h.cfg.Limiter.Usage(r.Context(), now, limiter.Subject{UserPath: caller.UserPath})
	if err != nil {
		writeError(w, providers.ProtocolOpenAI, apiError{status: http.StatusServiceUnavailable, typ: errTypeServer, code: errCodeServiceUnavailable,
			message: "the gateway cannot read its counters right now"}, 0)
		return
	}
	out := usageView{UserPath: caller.UserPath, RateLimits: []ruleUsageDoc{}}
	for _, u := range us {
		ref := limiter.Refusal{Rule: u.Rule, Child: u.Child}
		doc := ruleUsageDoc{
			Rule:       u.Rule.Scope.String() + ":" + ref.Subject() + ":" + limiter.PeriodName(u.Rule.Period),
			Subject:    ref.Subject(),
			Period:     limiter.PeriodName(u.Rule.Period),
			Dimensions: map[string]dimensionDoc{},
		}
		if !u.WindowStart.IsZero() {
			s, e := u.WindowStart.UTC(), u.WindowEnd.UTC()
			doc.WindowStart, doc.WindowEnd = &s, &e
		}
		for _, d := range u.Dimensions {
			doc.Dimensions[dimensionNames[d.Kind]] = dimensionDoc{Limit: d.Limit, Used: d.Used, Previous: d.Previous, Remaining: d.Remaining}
		}
		out.RateLimits = append(out.RateLimits, doc)
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
