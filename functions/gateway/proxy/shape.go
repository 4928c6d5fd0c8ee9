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
		if ref.Burndown > 1 {
			left /= ref.Burndown // on Bedrock's quota each output token counts Burndown times
		}
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

// wait waits out a refusal's exact Retry-After once, when it fits the
// request's class's longest wait and the request's deadline leaves time,
// and reports whether to try again. The wait is until the refusing
// counter has room for this request after what this instance promised to
// the requests already waiting on it (waitBook), which for the first
// waiter is the Retry-After; a request whose room comes later than its
// class allows gets its 429 at once. The wait is jittered upwards (up to
// a tenth, at most 250 ms, never past the class's bound) so that waiters
// refused together do not all come back at the same instant; never
// downwards, since a retry before its room is there is refused. Waits are
// per request, not a queue: a request never waits behind another class's.
func (h *Handler) wait(r *http.Request, ex *exchange, sk *skip, reqID string) bool {
	limit := h.cfg.Classes[ex.caller.Class]
	if limit <= 0 || !sk.retryable || sk.wait > limit {
		return false
	}
	if sk.decision != nil && sk.decision.Refused.Kind == limiter.KindInFlight {
		return false // when a slot frees is not known: its Retry-After is a guess, not worth waiting out
	}
	wait, release := sk.wait, func() {}
	if sk.decision != nil {
		var ok bool
		if wait, release, ok = h.waits.claim(h.cfg.Now(), sk.decision.Refused, limit); !ok {
			h.log.Info("not waiting: the room at Retry-After is promised to requests already waiting", "request_id", reqID,
				"class", ex.caller.Class, "rule", ruleName(sk.decision.Refused), "retry_after_ms", sk.wait.Milliseconds())
			return false
		}
	}
	defer release()
	d := wait + time.Duration(h.cfg.Rand()*float64(min(wait/10, 250*time.Millisecond, limit-wait)))
	if dl, ok := r.Context().Deadline(); ok && time.Until(dl) < d+time.Second {
		return false
	}
	h.log.Info("waiting out a Retry-After that fits the class's wait", "request_id", reqID, "class", ex.caller.Class,
		"wait_ms", d.Milliseconds(), "class_max_wait_ms", limit.Milliseconds())
	h.observeWait(ex)
	return h.cfg.Sleep(r.Context(), d) == nil
}
