// Package admission is where tollgate decides what a request gets, before
// anything leaves: which targets of its model to try and in which order,
// why each one it does not use is skipped (paused, cooling down after an
// upstream 429, saturated by a provider or model rule), the charge of the
// one that admits it and the limiter's decision, or the refusal that
// answers it and whether it is first waited out (the request's traffic
// class) or its output cap clamped to what is left.
//
// It is free of HTTP: the gateway's handler parses a request into a
// Request, asks an Admission for its next Step, forwards what is admitted
// and reports back how the upstream answered. /admin/explain runs the
// same code in dry run (Explain): the limiter reads instead of charging,
// waits are not slept but evaluated at the instant they would end, so
// what explain says is what the request gets.
package admission

import (
	"context"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/pricing"
)

// Refresher keeps the rules and pauses admission reads in step with the
// store. Due tells, without reading the store, whether Refresh at now
// would read it; only then does admission call Refresh, within the store
// deadline, so that a request between two refreshes costs no deadline.
type Refresher interface {
	Due(now time.Time) bool
	Refresh(ctx context.Context, now time.Time)
}

// Config configures an Orchestrator.
type Config struct {
	Limiter *limiter.Limiter
	Catalog *providers.Catalog
	// Prices price each target's tokens for budgets; nil uses the
	// built-in table alone.
	Prices *pricing.Table
	// Refresh, when set, brings the rules and pauses up to date before
	// each admission (see configstore.Watcher).
	Refresh Refresher
	// Pauses, when set, returns the pauses in force: requests they match
	// are refused with the pause's reason, a paused provider or model
	// routed around.
	Pauses func() []limiter.Pause
	// Cooldowns, when set, shares upstream cooldowns across instances;
	// CooldownCache is how long this instance trusts what it read (1 s);
	// DefaultCooldown is the cooldown of a 429 that says nothing of when to
	// come back (2 s).
	Cooldowns       Cooldowns
	CooldownCache   time.Duration
	DefaultCooldown time.Duration
	// Upstream, when set, records what upstreams report of their own
	// limits (see upstream.go).
	Upstream UpstreamRecorder
	// Classes are the traffic classes and how long a request of each may
	// wait out a refusal's exact Retry-After (once, jittered, never past
	// the request's deadline) instead of being answered. Nil:
	// DefaultClasses.
	Classes map[string]time.Duration
	// Fallbacks are the classes' policies for targets other than a
	// request's first choice (a class not in it: FallbackAny).
	Fallbacks map[string]Fallback
	// Downgrades are the downgrade rules of the configuration, in order;
	// ManagedDowngrades, when set, returns those of the admin API, tried
	// after them.
	Downgrades        []Downgrade
	ManagedDowngrades func() []Downgrade
	// Streams bound the streams of each class (a class not in it: no
	// bound); see streams.go.
	Streams map[string]StreamLimit
	// Migrations, when set, returns the migrations with their shares in
	// force (see migrate.go).
	Migrations func() []Migration
	// ClampFloor, when positive, lets a request refused for its token
	// reservation go with its output cap lowered to what the rule leaves,
	// if that is at least ClampFloor. Off by default.
	ClampFloor int64
	// DefaultMaxTokens is the output reservation when a request sets no
	// cap of its own (1,024); MaxOutputTokens caps any output reservation
	// (DefaultMaxOutputTokens).
	DefaultMaxTokens int64
	MaxOutputTokens  int64
	// Estimates, when set, gives what requests of a route, model and key
	// really used: a request that sets no output cap reserves the learned
	// p95 (at least AdaptiveFloor), and with AdaptiveCapped one that sets a
	// cap too, never above its cap.
	Estimates      Estimates
	AdaptiveFloor  int64
	AdaptiveCapped bool
	// RealtimeMaxSession is how long a Realtime session holds its slot (30
	// min); RealtimeSessionTokens the tokens a session reserves (0: none).
	RealtimeMaxSession    time.Duration
	RealtimeSessionTokens int64
	// FailOpen admits requests when the limit store cannot answer; by
	// default (false) they get StepUnavailable and nothing goes upstream.
	FailOpen bool
	// StoreTimeout is the deadline of each store call on a request's path
	// (DefaultStoreTimeout): past it the store is taken as failing.
	StoreTimeout time.Duration
	// Observer receives what the dashboard and the report count (nil:
	// nothing); Metrics what the gateway decides (nil: nothing).
	Observer Observer
	Metrics  metrics.Sink
	Logger   *slog.Logger
	// Now is the clock (nil: time.Now); Rand draws weighted targets and
	// jitter (nil: math/rand/v2); Sleep waits d or until ctx ends (nil: a
	// timer).
	Now   func() time.Time
	Rand  func() float64
	Sleep func(ctx context.Context, d time.Duration) error
}

// Cooldowns remember, across every gateway instance, that a provider's
// model asked to be left alone (it answered 429, or reported nothing left)
// and until when. The embedded and the DynamoDB store both keep them.
type Cooldowns interface {
	// CooldownUntil returns, for each key that is cooling down or was, the
	// end of its cooldown.
	CooldownUntil(ctx context.Context, keys []string) (map[string]time.Time, error)
	// SetCooldown extends a key's cooldown to until; it never shortens one.
	SetCooldown(ctx context.Context, key string, until time.Time) error
}

// Estimates gives learned output estimates.
type Estimates interface {
	OutputEstimate(ctx context.Context, route, model, key string) (Estimate, bool)
}

// Estimate is a learned p95 of output tokens and how many requests it
// rests on; PerKey when it is the key's own, not its route's and model's.
type Estimate struct {
	P95     int64
	Samples int64
	PerKey  bool
}

// Observer receives what the dashboard and the review report count of
// the gateway's decisions (metrics.Stats is one). It is called on the
// request's path, so it must not block.
type Observer interface {
	Outcome(metrics.Outcome)
	Completed(metrics.Completion)
}

// The traffic classes a request can name, most urgent first.
const (
	ClassInteractive = "interactive"
	ClassStandard    = "standard"
	ClassBatch       = "batch"
	ClassBackground  = "background"
)

// DefaultClasses are the classes and their longest waits when the
// configuration sets none: 300ms, 2s, 20s, 60s.
func DefaultClasses() map[string]time.Duration {
	return map[string]time.Duration{
		ClassInteractive: 300 * time.Millisecond, ClassStandard: 2 * time.Second,
		ClassBatch: 20 * time.Second, ClassBackground: time.Minute,
	}
}

// Defaults of the Config.
const (
	DefaultAdaptiveFloor      = 64
	DefaultMaxOutputTokens    = 128_000
	DefaultRealtimeMaxSession = 30 * time.Minute
	DefaultStoreTimeout       = 2 * time.Second
)

// Orchestrator decides admissions. It is safe for concurrent use.
type Orchestrator struct {
	cfg    Config
	log    *slog.Logger
	cool   *lru.Cache[string, cooldownEntry]
	health storeHealth // whether the store answers in time
	waits  waitBook    // what this instance promised to waiting requests
	// upstream is what this instance recorded and warned of upstream
	// reports.
	upstream upstreamNotes
	// migrations is what this instance counted of migrations' answers.
	migrations migrationBook

	// inProcess is the limiter's InProcess: see LimiterCall.
	inProcess bool
	// facts are the targets' prices and output limits, once read.
	facts targetFacts

	failOpenAdmits atomic.Int64
	shadowRefusals atomic.Int64
}

// New returns an Orchestrator.
func New(cfg Config) (*Orchestrator, error) {
	if cfg.Limiter == nil || cfg.Catalog == nil {
		return nil, errors.New("admission: Limiter and Catalog are required")
	}
	if cfg.Prices == nil {
		cfg.Prices = pricing.New(nil, nil)
	}
	if cfg.Classes == nil {
		cfg.Classes = DefaultClasses()
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 1024
	}
	if cfg.MaxOutputTokens <= 0 {
		cfg.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if cfg.AdaptiveFloor <= 0 {
		cfg.AdaptiveFloor = DefaultAdaptiveFloor
	}
	if cfg.RealtimeMaxSession <= 0 {
		cfg.RealtimeMaxSession = DefaultRealtimeMaxSession
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = DefaultStoreTimeout
	}
	if cfg.CooldownCache <= 0 {
		cfg.CooldownCache = time.Second
	}
	if cfg.DefaultCooldown <= 0 {
		cfg.DefaultCooldown = 2 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.Discard{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = mrand.Float64
	}
	if cfg.Sleep == nil {
		cfg.Sleep = Sleep
	}
	o := &Orchestrator{cfg: cfg, log: cfg.Logger, cool: lru.New[string, cooldownEntry](maxCooldownEntries), inProcess: cfg.Limiter.InProcess()}
	o.upstream.recorded = lru.New[string, recordedReport](maxCooldownEntries)
	o.upstream.warned = map[string]bool{}
	return o, nil
}

// Classes returns the traffic classes and their longest waits.
func (o *Orchestrator) Classes() map[string]time.Duration { return o.cfg.Classes }

// FailOpenAdmits returns how many requests were admitted without a limit
// check because the store was unavailable (failure mode open).
func (o *Orchestrator) FailOpenAdmits() int64 { return o.failOpenAdmits.Load() }

// ShadowRefusals returns how many refusals shadow rules would have made.
func (o *Orchestrator) ShadowRefusals() int64 { return o.shadowRefusals.Load() }

// Sleep waits d, or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
