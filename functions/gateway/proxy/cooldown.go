package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/providers"
)

// writeCooldown answers a request every target of which is cooling down.
func writeCooldown(w http.ResponseWriter, proto providers.Protocol, t providers.Target, until, now time.Time) {
	wait := max(until.Sub(now), 0)
	h := w.Header()
	h.Set(headerDecision, DecisionLocalReject)
	h.Set(headerRule, "cooldown:"+t.String())
	setRetryAfter(h, wait)
	writeError(w, proto, apiError{
		status: http.StatusTooManyRequests, typ: errTypeRateLimit, code: errCodeRateLimitExceeded,
		message: "provider " + t.Provider.Name() + " asked to wait before more " + t.Model +
			" requests; retry after " + strconv.FormatInt(ceilSeconds(wait), 10) + "s",
		decision: DecisionLocalReject,
	}, wait)
}
