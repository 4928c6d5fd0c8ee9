package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// HeaderClamped announces that the gateway lowered a request's output cap
// to fit the token budget.
const HeaderClamped = "X-Tollgate-Max-Tokens-Clamped"

// clamp lowers a request's output cap to what a token refusal leaves, when
// ClampFloor allows and at least that much is left, and reports whether
// the request should be admitted again.
func (h *Handler) clamp(w http.ResponseWriter, ex *exchange, sk *skip) bool {
	if h.cfg.ClampFloor <= 0 || sk.decision == nil {
		return false
	}
	ref := sk.decision.Refused
	var left int64
	switch ref.Kind {
	case limiter.KindTokens:
		left = sk.decision.Tokens.Remaining - ex.inputTokens
	case limiter.KindOutputTokens:
		left = sk.decision.Tokens.Remaining
	default:
		return false
	}
	if left < h.cfg.ClampFloor || left >= ex.reserveOut {
		return false
	}
	field := ""
	switch ex.op {
	case providers.OpChat:
		field = "max_tokens"
		if ex.capField != "" {
			field = ex.capField
		}
	case providers.OpResponses:
		field = "max_output_tokens"
	case providers.OpMessages:
		field = "max_tokens"
	default:
		return false
	}
	body, err := providers.SetModel(ex.body, "", map[string]any{field: left})
	if err != nil {
		return false
	}
	h.log.Info("clamping the output cap to fit the token budget",
		"user_path", ex.caller.UserPath, "rule", ruleName(ref), "from", ex.reserveOut, "to", left)
	ex.body, ex.maxTokens, ex.reserveOut = body, left, left
	w.Header().Set(HeaderClamped, strconv.FormatInt(left, 10))
	return true
}

// wait waits out a short Retry-After once, when the route allows it and
// the request's deadline leaves time, and reports whether to try again.
func (h *Handler) wait(r *http.Request, ex *exchange, sk *skip, reqID string) bool {
	limit := h.cfg.MaxWait[ex.op.String()]
	if limit <= 0 || !sk.retryable || sk.wait > limit {
		return false
	}
	if dl, ok := r.Context().Deadline(); ok && time.Until(dl) < sk.wait+time.Second {
		return false
	}
	h.log.Info("waiting out a short Retry-After instead of refusing", "request_id", reqID, "wait_ms", sk.wait.Milliseconds())
	return h.cfg.Sleep(r.Context(), sk.wait) == nil
}
