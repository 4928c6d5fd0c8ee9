package admission

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// Explanation is what a dry run of a request found: the route it
// resolved to, every target it looked at and why each it did not use
// was skipped, and the step the request would get.
type Explanation struct {
	Route providers.Route
	Trace Trace
	Step  Step
}

// Trace is what a dry run found, in order. A request that is not a dry
// run keeps none (a nil *Trace records nothing).
type Trace struct {
	Looks []Look
	// ClampedTo is the output cap the request was lowered to (0: not
	// clamped); Waited how long it waited out a refusal (0: it did not).
	ClampedTo int64
	Waited    time.Duration
}

// Look is one target's look: what the limiter was asked, what each rule
// found, and why the target was skipped (nil Skip: it admitted).
type Look struct {
	Pass    int
	Target  providers.Target
	Request limiter.Request
	Rules   []limiter.ExplainedRule
	Skip    *Skip
}

func (t *Trace) look(pass int, target providers.Target, lr limiter.Request) {
	if t != nil {
		t.Looks = append(t.Looks, Look{Pass: pass, Target: target, Request: lr})
	}
}

func (t *Trace) rules(rs []limiter.ExplainedRule) {
	if t != nil && len(t.Looks) > 0 {
		t.Looks[len(t.Looks)-1].Rules = rs
	}
}

func (t *Trace) skipped(sk *Skip) {
	if t == nil {
		return
	}
	if n := len(t.Looks); n > 0 && t.Looks[n-1].Target == sk.Target && t.Looks[n-1].Skip == nil {
		t.Looks[n-1].Skip = sk
		return
	}
	t.Looks = append(t.Looks, Look{Target: sk.Target, Skip: sk})
}

func (t *Trace) clamped(n int64) {
	if t != nil {
		t.ClampedTo = n
	}
}

func (t *Trace) waited(d time.Duration) {
	if t != nil {
		t.Waited += d
	}
}

// Explain runs req's admission in dry run: the limiter reads instead of
// charging, nothing is logged or counted, and a wait is not slept but
// evaluated at the instant it would end. Its step is what the request
// would get now (an upstream's own failure aside). Its errors are
// ErrUnknownModel and the store's.
func (o *Orchestrator) Explain(ctx context.Context, req Request) (Explanation, error) {
	a, err := o.begin(ctx, req, true)
	if err != nil {
		return Explanation{}, err
	}
	a.trace = &Trace{}
	st := a.Next(ctx)
	if st.Kind == Unavailable {
		return Explanation{}, st.Err
	}
	return Explanation{Route: a.route, Trace: *a.trace, Step: st}, nil
}
