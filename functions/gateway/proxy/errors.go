package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// Values of the x-tollgate-decision header and the gateway_decision field:
// whether the gateway refused on its own, or the provider answered 429
// after the gateway admitted the request. The first is deliberate
// protection; the second means a limit is calibrated wrong.
const (
	DecisionLocalReject         = "local_reject"
	DecisionUpstreamRateLimited = "upstream_rate_limited"
	headerDecision              = "X-Tollgate-Decision"
	headerRule                  = "X-Tollgate-Rule"
	headerShouldRetry           = "X-Should-Retry"
	shouldNotRetryAfter         = 60 * time.Second
	errTypeRateLimit            = "rate_limit_error"
	errTypeInvalidRequest       = "invalid_request_error"
	errTypeAuthentication       = "authentication_error"
	errTypePermission           = "permission_error"
	errTypeNotFound             = "not_found_error"
	errTypeServer               = "api_error"
	errTypeOverloaded           = "overloaded_error"
	errCodeRateLimitExceeded    = "rate_limit_exceeded"
	errCodeServiceUnavailable   = "service_unavailable"
	errCodeModelNotFound        = "model_not_found"
	errCodeInvalidAPIKey        = "invalid_api_key"
	errCodeRequestTooLarge      = "request_too_large"
	errCodeUnsupportedMediaType = "unsupported_media_type"
	errCodeInvalidUserPath      = "invalid_user_path"
	errCodeInvalidTags          = "invalid_tags"
	// A budget's refusal: what OpenAI answers for a billing limit, which
	// its SDKs do not retry.
	errInsufficientQuota = "insufficient_quota"
	// A budget whose room is only reserved by requests not yet settled:
	// retryable, once they settle.
	errBudgetReserved   = "budget_reserved"
	headerShadowRefusal = "X-Tollgate-Shadow-Refusal"
	headerBudgetLeft    = "X-Tollgate-Budget-Remaining-Usd"
	headerBudgetReset   = "X-Tollgate-Budget-Reset"
	errCodeUpstream     = "upstream_error"
	errCodeNotSupported = "not_supported"
)

// apiError is an error answer, written in the client's protocol.
type apiError struct {
	status   int
	typ      string // OpenAI/Anthropic error type
	code     string // OpenAI error code
	param    string
	message  string
	decision string // gateway_decision, for rate limits
	reason   string // Gemini's ErrorInfo reason with a decision; RATE_LIMIT_EXCEEDED by default
}

// gemini status names by HTTP status.
var geminiStatus = map[int]string{
	400: "INVALID_ARGUMENT",
	401: "UNAUTHENTICATED",
	403: "PERMISSION_DENIED",
	404: "NOT_FOUND",
	405: "INVALID_ARGUMENT",
	413: "INVALID_ARGUMENT",
	415: "INVALID_ARGUMENT",
	429: "RESOURCE_EXHAUSTED",
	500: "INTERNAL",
	502: "UNAVAILABLE",
	503: "UNAVAILABLE",
	504: "DEADLINE_EXCEEDED",
}

// writeError writes e in proto's error shape. retryDelay, when positive,
// becomes Gemini's RetryInfo.
func writeError(w http.ResponseWriter, proto providers.Protocol, e apiError, retryDelay time.Duration) {
	var body any
	switch proto {
	case providers.ProtocolAnthropic:
		inner := map[string]any{"type": e.typ, "message": e.message}
		if e.decision != "" {
			inner["gateway_decision"] = e.decision
		}
		body = map[string]any{"type": "error", "error": inner}
	case providers.ProtocolGemini:
		status := geminiStatus[e.status]
		if status == "" {
			status = "UNKNOWN"
		}
		inner := map[string]any{"code": e.status, "message": e.message, "status": status}
		var details []any
		if retryDelay > 0 {
			details = append(details, map[string]any{
				"@type":      "type.googleapis.com/google.rpc.RetryInfo",
				"retryDelay": strconv.FormatInt(ceilSeconds(retryDelay), 10) + "s",
			})
		}
		if e.decision != "" {
			reason := e.reason
			if reason == "" {
				reason = "RATE_LIMIT_EXCEEDED"
			}
			details = append(details, map[string]any{
				"@type":    "type.googleapis.com/google.rpc.ErrorInfo",
				"reason":   reason,
				"domain":   "tollgate",
				"metadata": map[string]string{"gateway_decision": e.decision},
			})
		}
		if details != nil {
			inner["details"] = details
		}
		body = map[string]any{"error": inner}
	default:
		inner := map[string]any{"message": e.message, "type": e.typ, "param": nil, "code": nil}
		if e.param != "" {
			inner["param"] = e.param
		}
		if e.code != "" {
			inner["code"] = e.code
		}
		if e.decision != "" {
			inner["gateway_decision"] = e.decision
		}
		body = map[string]any{"error": inner}
	}
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// rateHeaders are the x-ratelimit-* header names, canonical, per
// dimension: limit, remaining, reset.
var rateHeaders = [2][3]string{
	{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
}

// decisionHeaders are the headers a decision writes: what an earlier
// attempt at another target wrote is cleared before the next decision's
// (clearHeaders).
var decisionHeaders = []string{
	rateHeaders[0][0], rateHeaders[0][1], rateHeaders[0][2],
	rateHeaders[1][0], rateHeaders[1][1], rateHeaders[1][2],
	headerBudgetLeft, headerBudgetReset, headerShadowRefusal,
}

// forwardHeaders are the decisionHeaders and those a forward writes.
var forwardHeaders = append(decisionHeaders[:len(decisionHeaders):len(decisionHeaders)], HeaderDowngradedFrom, HeaderMigration)

// clearHeaders deletes the headers names from h.
func clearHeaders(h http.Header, names []string) {
	for _, name := range names {
		delete(h, name) // canonical: no Del's canonicalising
	}
}

// setRateHeaders writes the x-ratelimit-* headers of a decision (on
// headers an earlier attempt's are cleared from).
func setRateHeaders(h http.Header, d limiter.Decision) {
	// The values share one array: one allocation, not one a header.
	vals := make([]string, 0, 6)
	set := func(name, v string) {
		vals = append(vals, v)
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for i, q := range [2]limiter.Quota{d.Requests, d.Tokens} {
		names := rateHeaders[i]
		if !q.IsSet() {
			continue
		}
		// Canonical names set directly: no canonicalising on every call.
		set(names[0], strconv.FormatInt(q.Limit, 10))
		set(names[1], strconv.FormatInt(q.Remaining, 10))
		if q.HasReset {
			set(names[2], limiter.FormatReset(q.Reset))
		}
	}
}

// ruleName names a rule in the x-tollgate-rule header, logs and
// /v1/usage: its canonical ID (limiter.Rule.ID), the one the admin API
// takes in its URLs. What a per_child rule counted is the refusal's
// subject, in its message.
func ruleName(r *limiter.Refusal) string { return r.Rule.ID() }

// setPolicyHeaders writes what a decision says beyond the x-ratelimit-*
// headers: the tightest budget's remainder and reset, and the shadow
// rules that would have refused (on headers an earlier attempt's are
// cleared from).
func setPolicyHeaders(h http.Header, d limiter.Decision) {
	if b := d.Budget; b.IsSet() {
		h[headerBudgetLeft] = []string{limiter.FormatUSD(b.Remaining)}
		h[headerBudgetReset] = []string{b.Reset.UTC().Format(time.RFC3339)}
	}
	for i := range d.Shadow {
		h.Add(headerShadowRefusal, ruleName(&d.Shadow[i]))
	}
}

// writeRefusal writes the 429 of a local refusal: a rate limit's, or a
// budget's insufficient_quota.
func writeRefusal(w http.ResponseWriter, proto providers.Protocol, d limiter.Decision) {
	e, delay := refusalError(w.Header(), d)
	writeError(w, proto, e, delay)
}

// refusalError is the error of a rule's refusal, its headers set on h.
func refusalError(h http.Header, d limiter.Decision) (apiError, time.Duration) {
	r := d.Refused
	clearHeaders(h, decisionHeaders)
	setRateHeaders(h, d)
	setPolicyHeaders(h, d)
	h.Set(headerDecision, DecisionLocalReject)
	h.Set(headerRule, ruleName(r))
	var delay time.Duration
	switch {
	case r.ReservedOnly:
		// Room comes back when the reservations settle: a retry then is
		// admitted, so the answer stays retryable whatever its length.
		delay = r.RetryAfter
		setRetryAfterHeaders(h, delay)
	case r.Retryable:
		delay = r.RetryAfter
		setRetryAfter(h, delay)
	default:
		h.Set(headerShouldRetry, "false")
	}
	e := apiError{
		status:   http.StatusTooManyRequests,
		typ:      errTypeRateLimit,
		code:     errCodeRateLimitExceeded,
		message:  r.Message(),
		decision: DecisionLocalReject,
	}
	switch {
	case r.ReservedOnly:
		e.code, e.reason = errBudgetReserved, "BUDGET_RESERVED"
	case r.IsBudget():
		e.typ, e.code, e.reason = errInsufficientQuota, errInsufficientQuota, "BUDGET_EXHAUSTED"
	}
	return e, delay
}

// setRetryAfter writes Retry-After in whole seconds rounded up, the exact
// wait in retry-after-ms, and x-should-retry: false past a minute, because
// common SDKs ignore long Retry-After values and would retry at once.
func setRetryAfter(h http.Header, d time.Duration) {
	setRetryAfterHeaders(h, d)
	if d > shouldNotRetryAfter {
		h.Set(headerShouldRetry, "false")
	}
}

// setRetryAfterHeaders writes Retry-After (whole seconds, rounded up) and
// retry-after-ms, and nothing about whether to retry.
func setRetryAfterHeaders(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(ceilSeconds(d), 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10))
}

// DecisionPaused is x-tollgate-decision for a request refused by a pause.
const DecisionPaused = "paused"

// writePause writes the 503 of a paused scope, with its reason and, when
// the pause has an end, the wait until it.
func writePause(w http.ResponseWriter, proto providers.Protocol, p limiter.Pause, wait time.Duration) {
	e, delay := pauseError(w.Header(), p, wait)
	writeError(w, proto, e, delay)
}

// pauseError is the error of a pause, its headers set on h.
func pauseError(h http.Header, p limiter.Pause, wait time.Duration) (apiError, time.Duration) {
	h.Set(headerDecision, DecisionPaused)
	h.Set(headerRule, p.ID())
	subject := p.Subject
	if p.Scope != limiter.ScopeUserPath {
		subject = p.Scope.String() + " " + subject
	}
	msg := "requests for " + subject + " are paused"
	if p.Reason != "" {
		msg += ": " + p.Reason
	}
	var delay time.Duration
	if !p.Until.IsZero() && wait > 0 {
		delay = wait
		setRetryAfter(h, delay)
		msg += " (until " + p.Until.UTC().Format(time.RFC3339) + ")"
	} else {
		h.Set(headerShouldRetry, "false")
	}
	return apiError{status: http.StatusServiceUnavailable, typ: errTypeOverloaded, code: "paused",
		message: msg, decision: DecisionPaused, reason: "PAUSED"}, delay
}
