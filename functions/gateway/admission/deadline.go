package admission

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Every store call on a request's path has a deadline: a store that
// accepts connections and never answers (an engine stopped, a partition)
// must not hold requests. A call past StoreTimeout is taken as the store
// failing: admission answers by the failure mode (closed: 503 with
// nothing sent upstream; open: admitted, logged, counted), a look that
// only tunes a decision (cooldowns, learned estimates) is skipped.
//
// A store that timed out once is likely to again: for storeCooldown
// after a timeout the gateway does not wait on it at all, but for one
// probe at a time, so that during an outage only the probes wait and
// every other request is answered at once (TestStoreThatNeverAnswers).

// storeCooldown is how long after a store call timed out the others skip
// the store, while one probe tries it.
const storeCooldown = time.Second

// storeHealth remembers the last time a store call on the request path
// timed out, and lets one probe through per storeCooldown while it is
// recent. It keeps wall-clock time: it times the store, and decides
// nothing a client is told.
type storeHealth struct {
	stalled atomic.Int64 // unix ns of the last timeout; 0 after a success
	probe   atomic.Int64 // unix ns of the last probe let through
}

// skip reports whether a store call at now should not be made: the store
// timed out within storeCooldown and another call is already probing it.
func (s *storeHealth) skip(now time.Time) bool {
	last := s.stalled.Load()
	if last == 0 || now.UnixNano()-last >= int64(storeCooldown) {
		return false
	}
	p := s.probe.Load()
	if now.UnixNano()-p >= int64(storeCooldown) && s.probe.CompareAndSwap(p, now.UnixNano()) {
		return false // this call probes
	}
	return true
}

// note records how a store call ended: a timeout marks the store
// stalled, an answer (even a failed one) marks it answering.
func (s *storeHealth) note(now time.Time, err error) {
	switch {
	case err == nil:
		s.stalled.Store(0)
	case errors.Is(err, context.DeadlineExceeded):
		s.stalled.Store(now.UnixNano())
	}
}

// StoreCall runs one store call on the request's path with the store
// deadline. While the store is stalled (and another call probes it) the
// call runs with its deadline already passed: what needs the store fails
// at once, by the failure mode; what does not (an admission no rule
// matches, a key in the cache) goes on as usual.
func (o *Orchestrator) StoreCall(ctx context.Context, call func(ctx context.Context) error) error {
	timeout, probing := o.cfg.StoreTimeout, true
	if o.health.skip(time.Now()) {
		timeout, probing = 0, false
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := call(cctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return err // the client left: nothing learned of the store
	case err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded):
		err = errors.Join(err, context.DeadlineExceeded)
	}
	if probing {
		o.health.note(time.Now(), err)
	}
	return err
}

// LimiterCall is StoreCall for a call of the limiter's: one whose store
// is in this process (limiter.Limiter.InProcess) cannot stall, so its
// calls run with no deadline of their own, and cost no timer.
func (o *Orchestrator) LimiterCall(ctx context.Context, call func(ctx context.Context) error) error {
	if o.inProcess {
		return call(ctx)
	}
	return o.StoreCall(ctx, call)
}

// StoreContext is a detached context with the store deadline, for writes
// that must happen even when the client has gone (cooldowns, sessions,
// batch records).
func (o *Orchestrator) StoreContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), o.cfg.StoreTimeout)
}

// Refresh brings the rules and pauses up to date within the store
// deadline (Config.Refresh) when a refresh is due; a refresh that fails
// keeps those in force.
func (o *Orchestrator) Refresh(ctx context.Context) {
	if o.cfg.Refresh == nil {
		return
	}
	now := o.cfg.Now()
	if !o.cfg.Refresh.Due(now) {
		return
	}
	_ = o.StoreCall(ctx, func(ctx context.Context) error {
		o.cfg.Refresh.Refresh(ctx, now) // logs its own failure
		return ctx.Err()
	})
}

// StoreStalled reports whether a store call on the request path timed out
// within the last second and none has answered since.
func (o *Orchestrator) StoreStalled() bool {
	last := o.health.stalled.Load()
	return last != 0 && time.Now().UnixNano()-last < int64(storeCooldown)
}
