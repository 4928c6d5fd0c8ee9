package admission

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// ErrUnknownModel is Begin's answer for a model the catalog does not
// serve.
var ErrUnknownModel = errors.New("admission: the model is not served by this gateway")

// ErrUnknownProvider is Begin's answer for a provider the catalog does
// not have.
var ErrUnknownProvider = errors.New("admission: no provider of that name")

// StepKind is what the gateway does next with a request.
type StepKind int

const (
	// Forward sends the request to Step.Target, admitted by
	// Step.Decision, and reports how the upstream answered (Answered)
	// before asking for the next step.
	Forward StepKind = iota + 1
	// Refuse answers with Step.Refusal: no target could take the request
	// (and waiting or clamping did not help).
	Refuse
	// Unavailable answers 503 with nothing sent upstream: the limit store
	// cannot answer and the failure mode is closed.
	Unavailable
	// Failed answers with Step.Failure, the last upstream failure, when
	// every target tried failed; with none (no target at all), 502.
	Failed
)

// Step is one step of an admission.
type Step struct {
	Kind     StepKind
	Target   providers.Target
	Decision limiter.Decision
	// Refusal is what a Refuse answers: of the targets skipped, the one
	// retryable soonest (a consumer rule's or pause's at once); nil when
	// every target was incompatible.
	Refusal *Skip
	// Incompatible are the targets of a Refuse skipped as incompatible
	// (the answer is no_compatible_target when there are any).
	Incompatible []Skip
	// DowngradedFrom, on a Forward, names the target ("provider/model")
	// the request was downgraded from; Migration the migration whose
	// target it goes to.
	DowngradedFrom string
	Migration      string
	// Stream, on a Forward of a streaming request, is how long the
	// stream may run (see streams.go).
	Stream  StreamLimit
	Failure *providers.Error
	// Err is the store's error of an Unavailable step.
	Err error
}

// SkipReason is why a target was not used.
type SkipReason int

const (
	// SkipRefused: a rule refused the request at the target.
	SkipRefused SkipReason = iota + 1
	// SkipPaused: a pause matches the request at the target.
	SkipPaused
	// SkipCoolingDown: the target's upstream asked to be left alone
	// until Skip.Until (it answered 429, or reported nothing left).
	SkipCoolingDown
	// SkipIncompatible: the target cannot do what the request needs, or
	// its class does not fall back to it (Skip.Why).
	SkipIncompatible
	// SkipDowngrading: tried after a downgrade's model, since its
	// tightest budget is below the downgrade's fraction (Skip.Why).
	SkipDowngrading
)

func (r SkipReason) String() string {
	switch r {
	case SkipRefused:
		return "refused"
	case SkipPaused:
		return "paused"
	case SkipCoolingDown:
		return "cooling_down"
	case SkipIncompatible:
		return "incompatible"
	case SkipDowngrading:
		return "downgrading"
	}
	return "unknown"
}

// Skip is why one target was not used, and when it could be retried.
type Skip struct {
	Target    providers.Target
	Reason    SkipReason
	Wait      time.Duration
	Retryable bool
	Decision  *limiter.Decision // SkipRefused
	Pause     *limiter.Pause    // SkipPaused
	Until     time.Time         // SkipCoolingDown
	Why       string            // SkipIncompatible
}

// sooner reports whether a should be answered rather than b: retryable
// before not, then the shorter wait.
func (a *Skip) sooner(b *Skip) bool {
	if a.Retryable != b.Retryable {
		return a.Retryable
	}
	return a.Wait < b.Wait
}

// Admission is one request's way through its targets. It is not safe for
// concurrent use.
type Admission struct {
	o     *Orchestrator
	req   Request
	route providers.Route
	id    string
	dry   bool
	trace *Trace // dry run: what each target's look found

	reserveOut int64 // the output cap a reservation starts from
	now        time.Time
	fresh      bool // now is the clock still: no step returned, no wait yet
	pass       int
	targets    []providers.Target
	first      providers.Target // the pass's first choice
	next       int
	cooling    map[string]time.Time
	best       *Skip
	failed     *providers.Error
	// incompatible are the pass's targets that cannot take the request.
	incompatible []Skip
	// downgradedFrom maps a downgrade's target in the pass to what it
	// stands in for.
	downgradedFrom map[providers.Target]string
	// mig is the migration whose scope the request is in, migTo its
	// target, migrated whether the request was drawn for it; forwardAt
	// when the last Forward was returned.
	mig       *Migration
	migTo     providers.Target
	migrated  bool
	forwardAt time.Time
	need      Needs
	needsRead bool
	stopped   bool // the pass ended early: no other target can help
	clamped   bool
	waited    bool
}

// Begin starts the admission of req: it resolves the model to its
// targets (req.Route when set) and brings the rules up to date.
func (o *Orchestrator) Begin(ctx context.Context, req Request) (*Admission, error) {
	return o.begin(ctx, req, false)
}

func (o *Orchestrator) begin(ctx context.Context, req Request, dry bool) (*Admission, error) {
	route, err := o.resolve(req)
	if err != nil {
		return nil, err
	}
	o.Refresh(ctx)
	req.InputTokens = min(max(req.InputTokens, 0), limiter.MaxAmount)
	a := &Admission{o: o, req: req, route: route, id: req.ID, dry: dry, now: o.cfg.Now(), fresh: true}
	a.reserveOut = req.MaxTokens
	if a.reserveOut <= 0 {
		a.reserveOut = o.cfg.DefaultMaxTokens
	}
	if req.UserPathOnly || req.NoOutput || req.Free || req.Op == providers.OpEmbeddings {
		a.reserveOut = 0
	}
	if req.Session {
		a.reserveOut = o.cfg.RealtimeSessionTokens
	}
	return a, nil
}

// resolve is the route req goes through.
func (o *Orchestrator) resolve(req Request) (providers.Route, error) {
	switch {
	case req.Route != nil:
		return *req.Route, nil
	case req.Model == "" && req.Provider != "":
		p, ok := o.cfg.Catalog.Provider(req.Provider)
		if !ok {
			return providers.Route{}, ErrUnknownProvider
		}
		return providers.Route{Name: p.Name(), Strategy: providers.Failover, Targets: []providers.Target{{Provider: p, Weight: 1}}}, nil
	}
	route, ok := o.cfg.Catalog.Resolve(req.Model)
	if !ok {
		return providers.Route{}, ErrUnknownModel
	}
	return route, nil
}

// Route is the resolution the admission goes through.
func (a *Admission) Route() providers.Route { return a.route }

// clock is the admission's instant: the clock for a request (the instant
// it began, until it first waits or is answered: microseconds before on
// an embedded store, before the pass's reads of cooldowns and its charge
// on DynamoDB, each bounded by StoreTimeout, as an instant read before a
// store call always is), the instant a dry run has reached (its waits
// move it on).
func (a *Admission) clock() time.Time {
	if a.dry || a.fresh {
		return a.now
	}
	return a.o.cfg.Now()
}

// Next returns what to do next: forward to a target, or answer.
func (a *Admission) Next(ctx context.Context) Step {
	defer func() { a.fresh = false }() // what comes after takes time: the clock is read again
	for {
		if a.targets == nil {
			a.startPass(ctx)
		}
		if !a.stopped && a.next < len(a.targets) {
			i := a.next
			a.next++
			if st, ok := a.try(ctx, a.targets[i], i); ok {
				return st
			}
			continue
		}
		if st, again := a.endPass(ctx); !again {
			return st
		}
	}
}

func (a *Admission) startPass(ctx context.Context) {
	a.targets = a.o.order(a.route)
	a.first = providers.Target{}
	if len(a.targets) > 0 {
		a.first = a.targets[0]
	}
	a.migrate()
	a.cooling = a.o.cooldownsOf(ctx, a.clock(), a.targets)
	a.next, a.best, a.failed, a.stopped, a.incompatible, a.downgradedFrom = 0, nil, nil, false, nil, nil
}

// consider keeps sk when it is the one to answer so far.
func (a *Admission) consider(sk *Skip) {
	a.trace.skipped(sk)
	if a.best == nil || sk.sooner(a.best) {
		a.best = sk
	}
}

// try looks at target t (the i-th of the pass): it skips the target
// (returning false), or returns the step to take.
func (a *Admission) try(ctx context.Context, t providers.Target, i int) (Step, bool) {
	now := a.clock()
	if until, ok := a.cooldownOf(t); ok && until.After(now) {
		a.logf("skipped: provider cooling down after a 429", "provider", t.Provider.Name(), "target_model", t.Model,
			"until", until, "next_target", true)
		a.look(t, limiter.Request{})
		a.consider(&Skip{Target: t, Reason: SkipCoolingDown, Wait: until.Sub(now), Retryable: true, Until: until})
		return Step{}, false
	}
	lr := a.limiterRequest(ctx, t, i)
	a.look(t, lr)
	if t != a.first || a.req.residency() != "" {
		if why := a.incompatibility(t, a.first, lr.OutputTokens); why != "" {
			a.skipIncompatible(t, why)
			return Step{}, false
		}
	}
	if p, paused := a.paused(now, lr.Subject); paused {
		a.refusedByPause(t, p)
		kept := p // the skip's own copy: p stays on the stack
		sk := &Skip{Target: t, Reason: SkipPaused, Pause: &kept, Retryable: !p.Until.IsZero(), Wait: p.Until.Sub(now)}
		a.consider(sk)
		a.stopped = p.Consumer()
		return Step{}, false
	}
	if a.budgetLow(ctx, now, t, lr) && a.offerDowngrade(t, false) {
		// The downgrade's target first; t after it, if it cannot take it.
		a.targets = slices.Insert(a.targets, a.next+1, t)
		a.trace.skipped(&Skip{Target: t, Reason: SkipDowngrading, Why: "its tightest budget is below the downgrade's fraction: its downgrade first"})
		return Step{}, false
	}
	d, err := a.decide(ctx, now, lr)
	if err != nil {
		a.o.cfg.Metrics.Count(metrics.StoreFailures, 1)
		if a.dry || !a.o.cfg.FailOpen {
			if !a.dry {
				a.o.log.Error("refused: limit store unavailable (failure mode closed)",
					"request_id", a.id, "user_path", a.req.Caller.UserPath, "err", err)
			}
			return Step{Kind: Unavailable, Err: err}, true
		}
		a.o.log.Warn("admitted without limits: limit store unavailable (failure mode open)",
			"request_id", a.id, "user_path", a.req.Caller.UserPath, "provider", t.Provider.Name(), "err", err)
		a.o.failOpenAdmits.Add(1)
		a.o.cfg.Metrics.Count(metrics.FailOpenAdmissions, 1)
		d = limiter.Decision{Allowed: true}
	}
	a.logShadow(t, d)
	if !d.Allowed {
		a.logRefusal(t, d)
		refused := d // the skip's own copy: an admission's d stays on the stack
		a.consider(&Skip{Target: t, Reason: SkipRefused, Wait: d.Refused.RetryAfter, Retryable: d.Refused.Retryable, Decision: &refused})
		// A refusal by the caller's own rule ends the pass: no other
		// target can help, but a cheaper model the class opts into may.
		switch offered := a.offerDowngrade(t, true); {
		case offered && consumerScope(d.Refused.Scope()):
			a.targets = a.targets[:a.next+1] // the downgrade's target alone
		case consumerScope(d.Refused.Scope()):
			a.stopped = true
		}
		return Step{}, false
	}
	a.admitted(t, d)
	st := Step{Kind: Forward, Target: t, Decision: d, DowngradedFrom: a.downgradedFrom[t], Stream: a.streamLimit(lr, d)}
	if a.mig != nil {
		a.forwardAt = a.o.cfg.Now()
	}
	switch {
	case st.DowngradedFrom != "":
		a.downgraded(t, st.DowngradedFrom)
	case a.migrated && t == a.migTo:
		st.Migration = a.mig.Name
		a.migratedTo(t)
	case t != a.first:
		a.fellBack(t)
	}
	return st, true
}

// cooldownOf is the end of target t's cooldown, if the pass found one
// (its key is built only then: most passes find none).
func (a *Admission) cooldownOf(t providers.Target) (time.Time, bool) {
	if len(a.cooling) == 0 {
		return time.Time{}, false
	}
	until, ok := a.cooling[CooldownKey(t)]
	return until, ok
}

// skipIncompatible records that target t cannot take the request.
func (a *Admission) skipIncompatible(t providers.Target, why string) {
	sk := Skip{Target: t, Reason: SkipIncompatible, Why: why}
	a.incompatible = append(a.incompatible, sk)
	a.trace.skipped(&a.incompatible[len(a.incompatible)-1])
	if !a.dry {
		a.o.cfg.Metrics.Count(metrics.Incompatible, 1, "Target", t.String())
		a.logf("skipped: the target cannot take the request", "provider", t.Provider.Name(), "target_model", t.Model,
			"first_choice", a.first.String(), "why", why)
	}
}

// limiterRequest is what the limiter is asked for target t.
func (a *Admission) limiterRequest(ctx context.Context, t providers.Target, i int) limiter.Request {
	f := a.o.facts.of(a.o, t)
	c := a.req.Caller
	lr := limiter.Request{
		ID:             leaseID(a.id, a.pass, i),
		Subject:        limiter.Subject{UserPath: c.UserPath, Provider: t.Provider.Name(), Model: t.Model, Key: c.KeyID, Tags: c.Tags},
		Route:          a.req.Op.String(),
		InputTokens:    a.req.chargedInput(),
		OutputTokens:   a.reservation(ctx, t.Model, f),
		OutputBurndown: burndownOf(t),
		Price:          f.price,
		ConsumerOnly:   a.req.UserPathOnly,
		Stream:         a.req.Stream,
		Class:          c.Class,
	}
	if a.req.Session {
		lr.LeaseTTL = a.o.cfg.RealtimeMaxSession
	}
	return lr
}

// paused returns the pause in force at now that matches s, if any.
func (a *Admission) paused(now time.Time, s limiter.Subject) (limiter.Pause, bool) {
	if a.o.cfg.Pauses == nil {
		return limiter.Pause{}, false
	}
	return limiter.Paused(a.o.cfg.Pauses(), now, s)
}

// decide asks the limiter: to charge, or, in a dry run, to read.
func (a *Admission) decide(ctx context.Context, now time.Time, lr limiter.Request) (limiter.Decision, error) {
	if a.req.Free {
		return limiter.Decision{Allowed: true}, nil
	}
	var d limiter.Decision
	err := a.o.LimiterCall(ctx, func(ctx context.Context) error {
		if a.dry {
			ex, err := a.o.cfg.Limiter.Explain(ctx, now, lr)
			d = ex.Decision
			a.trace.rules(ex.Rules)
			return err
		}
		var err error
		d, err = a.o.cfg.Limiter.Admit(ctx, now, lr)
		return err
	})
	if !a.dry {
		a.o.cfg.Metrics.Observe(metrics.AdmissionLatency, float64(a.o.cfg.Now().Sub(now).Microseconds())/1000, "Milliseconds")
	}
	return d, err
}

// Answered reports how target t's upstream answered a forwarded request:
// perr nil when it answered (limits: what it reported of its own), else
// its failure, after which Next fails over or ends.
func (a *Admission) Answered(ctx context.Context, t providers.Target, limits providers.UpstreamLimits, perr *providers.Error) {
	a.answeredMigration(t, perr)
	if perr == nil {
		a.o.noteUpstream(ctx, t, limits)
		a.o.coolDownIfExhausted(ctx, t, limits)
		return
	}
	a.o.noteUpstream(ctx, t, perr.Limits)
	if perr.RateLimited() {
		a.o.cfg.Metrics.Count(metrics.UpstreamRateLimited, 1, "Provider", t.Provider.Name())
		a.observeUpstream429(t, perr)
		a.o.coolDown(ctx, t, perr.Limits, "answered 429")
	}
	a.failed = perr
	a.stopped = a.stopped || !perr.Retryable()
}

// endPass ends a pass over the targets: it answers, or (again) starts
// another pass after lowering the output cap or waiting.
func (a *Admission) endPass(ctx context.Context) (st Step, again bool) {
	defer func() {
		if again {
			a.targets = nil
			a.pass++
		}
	}()
	sk := a.best
	if sk == nil {
		if len(a.incompatible) > 0 && a.failed == nil {
			return Step{Kind: Refuse, Incompatible: a.incompatible}, false
		}
		return Step{Kind: Failed, Failure: a.failed}, false
	}
	if !a.clamped && a.clamp(sk) {
		a.clamped = true
		return Step{}, true
	}
	if !a.waited && a.wait(ctx, sk) {
		a.waited = true
		return Step{}, true
	}
	return Step{Kind: Refuse, Refusal: sk, Incompatible: a.incompatible}, false
}
