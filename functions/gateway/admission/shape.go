package admission

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// clamp lowers the request's output cap to what a token refusal leaves,
// when ClampFloor allows and at least that much is left, and reports
// whether the request should be admitted again. Only the routes whose
// body carries a cap the gateway can lower are clamped.
func (a *Admission) clamp(sk *Skip) bool {
	floor := a.o.cfg.ClampFloor
	if floor <= 0 || sk.Decision == nil {
		return false
	}
	switch a.req.Op {
	case providers.OpChat, providers.OpResponses, providers.OpMessages:
	default:
		return false
	}
	d := sk.Decision
	var left int64
	switch d.Refused.Kind {
	case limiter.KindTokens:
		left = d.Tokens.Remaining - a.req.InputTokens
		if d.Refused.Burndown > 1 {
			left /= d.Refused.Burndown // on Bedrock's quota each output token counts Burndown times
		}
	case limiter.KindOutputTokens:
		left = d.Tokens.Remaining
	default:
		return false
	}
	if left < floor || left >= a.reserveOut {
		return false
	}
	if a.req.Body != nil && !a.req.Body.Clamp(left) {
		return false
	}
	a.logf("clamping the output cap to fit the token budget", "rule", ruleName(d.Refused), "from", a.reserveOut, "to", left)
	a.trace.clamped(left)
	a.req.MaxTokens, a.reserveOut = left, left
	return true
}

// wait waits out a refusal's exact Retry-After once, when it fits the
// request's class's longest wait and the request's deadline leaves time,
// and reports whether to try again. The wait is until the refusing
// counter has room for this request after what this instance promised to
// the requests already waiting on it (waitBook), which for the first
// waiter is the Retry-After; a request whose room comes later than its
// class allows is answered at once. The wait is jittered upwards (up to
// a tenth, at most 250 ms, never past the class's bound) so that waiters
// refused together do not all come back at the same instant; never
// downwards, since a retry before its room is there is refused. Waits are
// per request, not a queue: a request never waits behind another class's.
// A dry run promises nothing and sleeps not: its clock moves on.
func (a *Admission) wait(ctx context.Context, sk *Skip) bool {
	class := a.req.Caller.Class
	limit := a.o.cfg.Classes[class]
	if limit <= 0 || !sk.Retryable || sk.Wait > limit {
		return false
	}
	if sk.Decision != nil && sk.Decision.Refused.Kind == limiter.KindInFlight {
		return false // when a slot frees is not known: its Retry-After is a guess, not worth waiting out
	}
	now := a.clock()
	wait, release := sk.Wait, func() {}
	if sk.Decision != nil {
		var ok bool
		if wait, release, ok = a.o.waits.claim(now, sk.Decision.Refused, limit, !a.dry); !ok {
			a.logf("not waiting: the room at Retry-After is promised to requests already waiting",
				"class", class, "rule", ruleName(sk.Decision.Refused), "retry_after_ms", sk.Wait.Milliseconds())
			return false
		}
	}
	defer release()
	d := wait + time.Duration(a.o.cfg.Rand()*float64(min(wait/10, 250*time.Millisecond, limit-wait)))
	if dl, ok := ctx.Deadline(); ok && !a.dry && time.Until(dl) < d+time.Second {
		return false
	}
	a.logf("waiting out a Retry-After that fits the class's wait", "class", class,
		"wait_ms", d.Milliseconds(), "class_max_wait_ms", limit.Milliseconds())
	a.trace.waited(d)
	if a.dry {
		a.now = a.now.Add(d)
		return true
	}
	a.observeWait()
	a.fresh = false
	return a.o.cfg.Sleep(ctx, d) == nil
}
