// Package reconcile settles token reservations with actual usage, exactly
// once per request, and releases the slots of requests whose process died.
//
// It reads lease changes from a Source (the lease table's stream, or the
// embedded store's change feed) from a checkpoint, settles completed leases
// through the Store (whose Settle is exactly-once per lease), and commits
// the checkpoint after each batch. A run that stops between applying a
// batch and committing it re-reads the batch next time; applying it again
// changes nothing.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Kind is what happened to a lease.
type Kind uint8

const (
	// Other changes need nothing: a new lease, a refusal, a rewrite.
	Other Kind = iota
	// Completed: the request finished and reported usage. Settle it.
	Completed
	// Expired: the lease expired without completing and its slots were
	// released by a sweep (a store that records leases at admission). Its
	// reservation stays charged.
	Expired
	// Removed: the lease item was deleted while still active (TTL
	// deletion of a lease no sweep expired, in a store that records leases
	// at admission). Release its slots.
	Removed
	// Refused: the admission was refused after the lease was written (or
	// its write's answer was lost). Its slots are released if that was not
	// done then.
	Refused
)

func (k Kind) String() string {
	return [...]string{"other", "completed", "expired", "removed", "refused"}[k]
}

// Change is one lease change read from a source.
type Change struct {
	// ID is the change's position in its source (a stream sequence
	// number), what a partial batch failure names.
	ID string
	// Position, set by a source that reads an ordered log, is what the
	// completion's settlement carries (limiter.Position): the changes of
	// one log come in its order.
	Position limiter.Position
	Kind     Kind
	Lease    limiter.Lease
	Used     limiter.Usage
	// At is when the change was written (approximately); zero if unknown.
	At time.Time
	// Released says the lease's slots were given back when it ended. When
	// false, the reconciler releases them (idempotently): a completion
	// whose release failed is not left to hold its slot until expiry.
	Released bool
}

// Batch is a run of changes read from a source.
type Batch struct {
	Changes []Change
	// Commit records that the batch was applied, so the next read starts
	// after it. It is safe for Commit to fail: the batch is read again and
	// reapplying it changes nothing.
	Commit func(ctx context.Context) error
}

// Source yields lease changes in order from a stored checkpoint.
type Source interface {
	// Next returns the next batch of at most max changes, or nil when
	// there is nothing more to read now.
	Next(ctx context.Context, max int) (*Batch, error)
}

// Store is what the reconciler changes.
type Store interface {
	// Settle applies settlements exactly once per lease; see limiter.Store.
	Settle(ctx context.Context, settlements []limiter.Settlement) (int, error)
	// Expire releases the slots of leases past their expiry that never
	// completed, and returns how many. A store whose slots stop counting
	// at their expiry by themselves (the DynamoDB store's) has nothing to
	// do.
	Expire(ctx context.Context, now time.Time) (int, error)
	// Release gives back the slots the leases hold, if they still do; it
	// is idempotent, so releasing a slot given back before changes
	// nothing. It returns how many leases it released slots of.
	Release(ctx context.Context, leases []limiter.Lease) (int, error)
}

// Config configures a Reconciler.
type Config struct {
	Source Source
	Store  Store
	Logger *slog.Logger
	// Now is the clock of the loop; nil is time.Now.
	Now func() time.Time
	// BatchSize bounds one read; default 1000.
	BatchSize int
	// OnRun, when set, is given each run's report (for metrics).
	OnRun func(Report)
	// Learn, when set, is given what the completed requests of each batch
	// used (exact counts only), for reservations that learn: those settled
	// by this call, so each request is learned from once however often its
	// change is read.
	Learn func(ctx context.Context, obs []Observation)
	// Margin is how long before its context's deadline a run stops taking
	// new batches, to commit and return cleanly. Default 5 s; a run whose
	// whole budget is short keeps at most a fifth of it as margin, so it
	// always has time to read.
	Margin time.Duration
}

// Observation is what one completed request used.
type Observation struct {
	Route, Model, Key string
	OutputTokens      int64
}

// Reconciler applies lease changes.
type Reconciler struct {
	cfg Config
	log *slog.Logger
}

// New returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Source == nil || cfg.Store == nil {
		return nil, errors.New("reconcile: Source and Store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.Margin <= 0 {
		cfg.Margin = 5 * time.Second
	}
	return &Reconciler{cfg: cfg, log: cfg.Logger}, nil
}

// Report is what one run or one Apply did.
type Report struct {
	Read       int // changes read
	Completed  int // completed leases seen
	Settled    int // settlements applied now
	Duplicates int // completed leases already settled before
	Expired    int // leases found expired (their slots released by a sweep)
	Refused    int // refused admissions seen
	Released   int // leases whose slots the reconciler released (removed, or not released when they ended)
	Swept      int // expired leases this run's sweep released (Store.Expire)
	// Lag is how far behind the newest change read was, when known.
	Lag time.Duration
	// Stopped is set when the run stopped early for its time budget.
	Stopped bool
	// Routes is the estimate error by route.
	Routes map[string]*RouteError
}

// RouteError compares what a route reserved with what it used.
type RouteError struct {
	Requests int
	Reserved int64 // tokens reserved at admission
	Used     int64 // tokens actually used
	Inexact  int   // requests whose usage was not reported in full
}

// Ratio is used/reserved: below 1, reservations were conservative.
func (e *RouteError) Ratio() float64 {
	if e.Reserved == 0 {
		return 0
	}
	return float64(e.Used) / float64(e.Reserved)
}

func (r *Report) add(o Report) {
	r.Read += o.Read
	r.Completed += o.Completed
	r.Settled += o.Settled
	r.Duplicates += o.Duplicates
	r.Expired += o.Expired
	r.Refused += o.Refused
	r.Released += o.Released
	r.Swept += o.Swept
	if o.Lag > 0 {
		r.Lag = o.Lag
	}
	for route, e := range o.Routes {
		if r.Routes == nil {
			r.Routes = map[string]*RouteError{}
		}
		t := r.Routes[route]
		if t == nil {
			t = &RouteError{}
			r.Routes[route] = t
		}
		t.Requests += e.Requests
		t.Reserved += e.Reserved
		t.Used += e.Used
		t.Inexact += e.Inexact
	}
}

// Run reads and applies batches until the source is caught up or the
// context's deadline is within Margin, sweeping expired leases first. It
// logs one line with what it did.
func (rc *Reconciler) Run(ctx context.Context) (Report, error) {
	start := rc.cfg.Now()
	var rep Report
	swept, err := rc.cfg.Store.Expire(ctx, start)
	rep.Swept = swept
	if err != nil {
		rc.log.Warn("expiry sweep failed; it runs again next time", "err", err)
	}
	deadline, hasDeadline := ctx.Deadline()
	margin := rc.cfg.Margin
	if hasDeadline {
		margin = min(margin, deadline.Sub(start)/5)
	}
	for {
		if hasDeadline && rc.cfg.Now().Add(margin).After(deadline) {
			rep.Stopped = true
			break
		}
		batch, err := rc.cfg.Source.Next(ctx, rc.cfg.BatchSize)
		if err != nil {
			rc.logRun(rep, start, err)
			return rep, err
		}
		if batch == nil {
			break
		}
		r, err := rc.apply(ctx, batch.Changes)
		rep.add(r)
		if err != nil {
			rc.logRun(rep, start, err)
			return rep, err
		}
		if err := batch.Commit(ctx); err != nil {
			err = fmt.Errorf("commit checkpoint: %w", err)
			rc.logRun(rep, start, err)
			return rep, err
		}
	}
	rc.logRun(rep, start, nil)
	return rep, nil
}

// Apply applies changes delivered by an event source mapping and returns
// the IDs of those to deliver again: on a failure, the first change not
// known to be applied and every change after it (applying them again is
// harmless).
func (rc *Reconciler) Apply(ctx context.Context, changes []Change) (Report, []string) {
	start := rc.cfg.Now()
	var rep Report
	const chunk = 100
	for i := 0; i < len(changes); i += chunk {
		part := changes[i:min(len(changes), i+chunk)]
		r, err := rc.apply(ctx, part)
		rep.add(r)
		if err != nil {
			rc.logRun(rep, start, err)
			var failed []string
			for _, c := range changes[i:] {
				failed = append(failed, c.ID)
			}
			return rep, failed
		}
	}
	rc.logRun(rep, start, nil)
	return rep, nil
}

// apply settles the completed leases among changes in one batch and
// releases the slots of removed ones.
func (rc *Reconciler) apply(ctx context.Context, changes []Change) (Report, error) {
	rep := Report{Read: len(changes), Routes: map[string]*RouteError{}}
	var settlements []limiter.Settlement
	var release []limiter.Lease
	var newest time.Time
	var obs []Observation
	for i := range changes {
		c := &changes[i]
		if c.At.After(newest) {
			newest = c.At
		}
		switch c.Kind {
		case Completed:
			rep.Completed++
			settlements = append(settlements, limiter.Settlement{Lease: &c.Lease, Used: c.Used, Position: c.Position})
			route := c.Lease.Route
			if route == "" {
				route = "unknown"
			}
			e := rep.Routes[route]
			if e == nil {
				e = &RouteError{}
				rep.Routes[route] = e
			}
			e.Requests++
			e.Reserved += c.Lease.Reserved.Total()
			e.Used += c.Used.Total()
			if !c.Used.Exact {
				e.Inexact++
			}
		case Expired:
			rep.Expired++
		case Refused:
			rep.Refused++
		}
		if c.Lease.HoldsSlots() && (c.Kind == Removed || (c.Kind != Other && !c.Released)) {
			release = append(release, c.Lease)
		}
	}
	if !newest.IsZero() {
		rep.Lag = rc.cfg.Now().Sub(newest)
	}
	if len(settlements) > 0 {
		n, err := rc.cfg.Store.Settle(ctx, settlements)
		rep.Settled = n
		// Learn from what was settled now, whatever else failed: a batch
		// read again is settled (and learned from) once.
		if obs = observations(settlements); len(obs) > 0 && rc.cfg.Learn != nil {
			rc.cfg.Learn(ctx, obs)
		}
		if err != nil {
			return rep, fmt.Errorf("settle: %w", err)
		}
		rep.Duplicates = len(settlements) - n - nothingToCorrect(settlements)
	}
	if len(release) > 0 {
		n, err := rc.cfg.Store.Release(ctx, release)
		rep.Released = n
		if err != nil {
			return rep, fmt.Errorf("release slots: %w", err)
		}
	}
	return rep, nil
}

// observations are what the settlements applied now used, for
// reservations that learn: exact counts of requests that reserved output.
func observations(ss []limiter.Settlement) []Observation {
	var obs []Observation
	for _, s := range ss {
		if !s.Applied || !s.Used.Exact || s.Lease.Reserved.OutputTokens <= 0 {
			continue
		}
		obs = append(obs, Observation{Route: cmp.Or(s.Lease.Route, "unknown"), Model: s.Lease.Model, Key: s.Lease.Key, OutputTokens: s.Used.OutputTokens})
	}
	return obs
}

// nothingToCorrect counts settlements whose usage equals their reservation
// (or that reserved no tokens): Settle skips them, they are no duplicates.
func nothingToCorrect(ss []limiter.Settlement) int {
	n := 0
	for _, s := range ss {
		if !limiter.NeedsSettling(s) {
			n++
		}
	}
	return n
}

func (rc *Reconciler) logRun(rep Report, start time.Time, err error) {
	if rc.cfg.OnRun != nil {
		rc.cfg.OnRun(rep)
	}
	attrs := []any{
		"records_read", rep.Read,
		"completed", rep.Completed,
		"settled", rep.Settled,
		"skipped_duplicates", rep.Duplicates,
		"expired_seen", rep.Expired,
		"refused_seen", rep.Refused,
		"slots_released", rep.Released,
		"expired_swept", rep.Swept,
		"lag_ms", rep.Lag.Milliseconds(),
		"stopped_for_budget", rep.Stopped,
		"duration_ms", rc.cfg.Now().Sub(start).Milliseconds(),
	}
	routes := make([]string, 0, len(rep.Routes))
	for r := range rep.Routes {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	var groups []any
	for _, r := range routes {
		e := rep.Routes[r]
		groups = append(groups, slog.Group(r,
			"requests", e.Requests, "reserved_tokens", e.Reserved, "used_tokens", e.Used,
			"actual_over_estimate", fmt.Sprintf("%.3f", e.Ratio()), "inexact", e.Inexact))
	}
	if len(groups) > 0 {
		attrs = append(attrs, slog.Group("estimate_error", groups...))
	}
	if err != nil {
		rc.log.Error("reconciler run failed; the unapplied batch is read again next run", append(attrs, "err", err.Error())...)
		return
	}
	switch {
	case rep.Stopped:
		rc.log.Warn("reconciler run stopped for its time budget; the next run goes on from the checkpoint", attrs...)
	case rep.Read == 0 && rep.Swept == 0:
		rc.log.Debug("reconciler run", attrs...)
	default:
		rc.log.Info("reconciler run", attrs...)
	}
}
