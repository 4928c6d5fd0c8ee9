package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/providers"
)

// writeCooldown answers a request every target of which is cooling down.
func writeCooldown(w http.ResponseWriter, proto providers.Protocol, t providers.Target, until, now time.Time) {
	e, wait := cooldownError(w.Header(), t, until, now)
	writeError(w, proto, e, wait)
}

// cooldownError is the error of a target cooling down, its headers set
// on h.
func cooldownError(h http.Header, t providers.Target, until, now time.Time) (apiError, time.Duration) {
	wait := max(until.Sub(now), 0)
	h.Set(headerDecision, DecisionLocalReject)
	h.Set(headerRule, "cooldown:"+t.String())
	setRetryAfter(h, wait)
	return apiError{
		status: http.StatusTooManyRequests, typ: errTypeRateLimit, code: errCodeRateLimitExceeded,
		message: "provider " + t.Provider.Name() + " asked to wait before more " + t.Model +
			" requests; retry after " + strconv.FormatInt(ceilSeconds(wait), 10) + "s",
		decision: DecisionLocalReject,
	}, wait
}
