package configstore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/limiter"
)

// Source is what a gateway reads of a store: Memory and Dynamo are both.
type Source interface {
	Version(ctx context.Context) (int64, error)
	Snapshot(ctx context.Context) (Snapshot, error)
	KeyByHash(ctx context.Context, hash string) (Key, error)
}

var (
	_ Source = (*Memory)(nil)
	_ Source = (*Dynamo)(nil)
)

// Watcher keeps a limiter's rules in step with the store: the config rules
// plus the manual ones, each with its counters' generation. A request
// calls Refresh; at most once per Interval one of them reads the store's
// version (one small consistent read) and, when it changed, the snapshot.
// A change written through the admin API is therefore enforced by every
// gateway instance within Interval of the write. Being driven by requests,
// not by a timer, it holds in Lambda too, where a frozen environment runs
// no timers.
type Watcher struct {
	src      Source
	config   []limiter.Rule
	limiter  *limiter.Limiter
	interval time.Duration
	log      *slog.Logger

	mu       sync.Mutex
	checking bool
	checked  time.Time
	version  int64
	loaded   bool
	// everLoaded is set after the first load, which Load does not clear.
	everLoaded bool
	// started is when this process started watching, its standing when
	// configurations disagree on a rule's shards (see layouts).
	started time.Time
	now     func() time.Time
	record  atomic.Bool
	// budgetZone aligns the admin API's budgets, as the config's are.
	budgetZone atomic.Pointer[time.Location]
	// pauses are the admin API's pauses as last loaded.
	pauses atomic.Pointer[[]limiter.Pause]
	// snap is the store's snapshot as last loaded.
	snap atomic.Pointer[Snapshot]
	// ramps are the ramped rules as last loaded, with where each stands;
	// health says whether a rule's upstream answered 429 since an instant.
	ramps  atomic.Pointer[[]rampEntry]
	health func(ctx context.Context, r limiter.Rule, since time.Time) bool
	// adaptKeys are the rules that follow their upstreams' reports, read
	// from reports; adapted the reports applied (see adapt.go).
	adaptKeys []limiter.RuleKey
	reports   UpstreamReader
	adapted   atomic.Pointer[map[string]limiter.UpstreamReport]
	// mig are the migrations it steps (see migrate.go).
	mig migrationWatch
}

type rampEntry struct {
	rule  limiter.Rule // as configured, at its maximum
	state limiter.RampState
}

// Rampers step ramps; both stores do.
type Rampers interface {
	StepRamp(ctx context.Context, k limiter.RuleKey, from, to limiter.RampState) error
}

// WatchRamps makes the watcher step ramped rules when their interval is
// over, asking healthy whether the rule's upstream stayed free of 429s
// since the last step; without it ramps hold at their start.
func (w *Watcher) WatchRamps(healthy func(ctx context.Context, r limiter.Rule, since time.Time) bool) {
	w.health = healthy
}

// stepRamps takes the steps that are due, and reports whether it changed
// any (the store's version moved, by its write or another instance's).
func (w *Watcher) stepRamps(ctx context.Context, now time.Time) bool {
	rs, ok := w.src.(Rampers)
	entries := w.ramps.Load()
	if !ok || w.health == nil || entries == nil {
		return false
	}
	moved := false
	for _, e := range *entries {
		if !e.rule.Ramp.Due(e.state, now) {
			continue
		}
		healthy := e.state.Level == 0 || w.health(ctx, e.rule, e.state.At)
		next := e.rule.Ramp.Next(e.state, now, healthy)
		err := rs.StepRamp(ctx, e.rule.Key(), e.state, next)
		switch {
		case err == nil:
			moved = true
			w.log.Info("ramp stepped", "rule", e.rule.ID(), "from", e.state.Level, "to", next.Level, "healthy", healthy)
		case errors.Is(err, ErrRampMoved):
			moved = true // another instance stepped first
		default:
			w.log.Warn("could not step a ramp", "rule", e.rule.ID(), "err", err)
		}
	}
	return moved
}

// Pauses returns the pauses as last loaded, which Refresh keeps as fresh
// as the rules.
func (w *Watcher) Pauses() []limiter.Pause {
	if p := w.pauses.Load(); p != nil {
		return *p
	}
	return nil
}

// AlignBudgets sets the zone the admin API's budgets' periods are aligned
// in (nil: UTC).
func (w *Watcher) AlignBudgets(loc *time.Location) { w.budgetZone.Store(loc) }

// DefaultInterval is how stale a gateway's rules may be.
const DefaultInterval = 2 * time.Second

// NewWatcher returns a Watcher. config are the rules of the file and the
// environment, which the admin API cannot change.
func NewWatcher(src Source, config []limiter.Rule, l *limiter.Limiter, interval time.Duration, log *slog.Logger) *Watcher {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{src: src, config: config, limiter: l, interval: interval, log: log, started: time.Now(), now: time.Now}
}

// Refresh brings the rules up to date if Interval has passed since the last
// look. Requests that arrive while another looks go on with the rules in
// force. A failure keeps the rules in force and is retried next interval.
func (w *Watcher) Refresh(ctx context.Context, now time.Time) {
	w.mu.Lock()
	if !w.due(now) {
		w.mu.Unlock()
		return
	}
	w.checking = true
	w.mu.Unlock()
	err := w.refresh(ctx, now)
	moved := false
	if err == nil {
		moved = w.stepRamps(ctx, now)
		moved = w.stepMigrations(ctx, now) || moved
		moved = w.readReports(ctx, now) || moved
	}
	if moved {
		w.mu.Lock()
		w.loaded = false
		w.mu.Unlock()
		err = w.refresh(ctx, now)
	}
	w.mu.Lock()
	w.checking = false
	w.checked = now
	w.mu.Unlock()
	if err != nil {
		w.log.Error("could not refresh the rules; keeping those in force", "err", err)
	}
}

// Due reports whether Refresh at now would read the store: nothing is
// loaded, or Interval has passed since the last look (or the clock went
// back before it), and no other request is looking.
func (w *Watcher) Due(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.due(now)
}

// due is Due with w.mu held.
func (w *Watcher) due(now time.Time) bool {
	return !w.checking && !(w.loaded && now.Sub(w.checked) < w.interval && !now.Before(w.checked))
}

// Current returns the store's snapshot as the rules in force were loaded
// from, after bringing them up to date whatever the interval: one read of
// the version when nothing changed, the snapshot too when it did. The
// admin API reads its lists through it, so a dashboard refreshing every few
// seconds costs one small read of the configuration, not a snapshot
// (counted in tests/dashboard_test.go, TestDashboardRefreshCost).
func (w *Watcher) Current(ctx context.Context) (Snapshot, error) {
	if err := w.refresh(ctx, w.now()); err != nil {
		return Snapshot{}, err
	}
	if s := w.snap.Load(); s != nil {
		return *s, nil
	}
	return Snapshot{}, nil
}

// Load reads the rules now, whatever the interval.
func (w *Watcher) Load(ctx context.Context) error {
	w.mu.Lock()
	w.loaded = false
	w.mu.Unlock()
	return w.refresh(ctx, w.now())
}

func (w *Watcher) refresh(ctx context.Context, now time.Time) error {
	v, err := w.src.Version(ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	same := w.loaded && v == w.version
	w.mu.Unlock()
	if same {
		return nil
	}
	snap, err := w.src.Snapshot(ctx)
	if err != nil {
		return err
	}
	merged := Merge(w.config, snap)
	var ramps []rampEntry
	for i := range merged {
		if merged[i].Ramp != nil {
			st := snap.Ramps[merged[i].Key()]
			ramps = append(ramps, rampEntry{rule: merged[i], state: st})
			merged[i] = merged[i].Ramped(max(st.Level, merged[i].Ramp.Start))
		}
	}
	w.ramps.Store(&ramps)
	w.adaptRules(merged) // after the ramps: a ramp never lifts a rule above its report
	for i := range merged {
		if b, ok := merged[i].Limit.(limiter.Budget); ok && merged[i].Source == limiter.SourceManual {
			b.Location = w.budgetZone.Load()
			merged[i].Limit = b
		}
	}
	rs, err := limiter.NewRules(w.layouts(ctx, merged, snap, now))
	if err != nil {
		return err
	}
	w.limiter.SetRules(rs)
	pauses := snap.Pauses
	w.pauses.Store(&pauses)
	w.snap.Store(&snap)
	w.mu.Lock()
	changed := !w.everLoaded || snap.Version != w.version
	w.version, w.loaded, w.everLoaded = snap.Version, true, true
	w.mu.Unlock()
	// A reload that finds what was there (the admin API reloads on every
	// read) is worth no line at INFO.
	level := slog.LevelDebug
	if changed {
		level = slog.LevelInfo
	}
	w.log.Log(ctx, level, "rules loaded", "version", snap.Version, "rules", rs.Len(), "manual", len(snap.Rules))
	return nil
}

// Merge builds the rule set in force: config rules, then manual ones, each
// with its generation. A manual rule that shadows a config rule is left
// out (the admin API refuses to create one).
func Merge(config []limiter.Rule, snap Snapshot) []limiter.Rule {
	out := make([]limiter.Rule, 0, len(config)+len(snap.Rules))
	seen := map[limiter.RuleKey]bool{}
	for _, r := range config {
		r.Generation = snap.Generations[r.Key()]
		seen[r.Key()] = true
		out = append(out, r)
	}
	for _, m := range snap.Rules {
		r := m.Rule
		if seen[r.Key()] {
			continue
		}
		r.Generation = snap.Generations[r.Key()]
		out = append(out, r)
	}
	return out
}

// KeyCache resolves managed keys with a short cache, of hits and misses
// alike, so a gateway does not read the store on every request and a
// revoked key is refused everywhere within TTL.
type KeyCache struct {
	src Source
	ttl time.Duration
	m   *lru.Cache[string, cached]
}

// maxKeyEntries bounds the key cache: anyone may send any bearer token,
// and a miss is cached too.
const maxKeyEntries = 10_000

type cached struct {
	key Key
	err error
	at  time.Time
}

// DefaultKeyTTL bounds how long a revoked key may still be accepted.
const DefaultKeyTTL = 5 * time.Second

// NewKeyCache returns a KeyCache.
func NewKeyCache(src Source, ttl time.Duration) *KeyCache {
	if ttl <= 0 {
		ttl = DefaultKeyTTL
	}
	return &KeyCache{src: src, ttl: ttl, m: lru.New[string, cached](maxKeyEntries)}
}

// Forget drops what the cache holds of the key with this hash, so that a
// key revoked by this process is refused by it at once.
func (c *KeyCache) Forget(hash string) { c.m.Delete(hash) }

// Lookup returns the live key with this secret at now: ErrNotFound when
// there is none, ErrKeyNotLive when it is revoked or expired.
func (c *KeyCache) Lookup(ctx context.Context, secret string, now time.Time) (Key, error) {
	h := Hash(secret)
	e, ok := c.m.Get(h)
	if !ok || now.Sub(e.at) >= c.ttl || now.Before(e.at) {
		k, err := c.src.KeyByHash(ctx, h)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Key{}, err // the store failed: do not cache
		}
		e = cached{key: k, err: err, at: now}
		c.m.Put(h, e)
	}
	if e.err != nil {
		return Key{}, e.err
	}
	if !e.key.Live(now) {
		return Key{}, ErrKeyNotLive
	}
	return e.key, nil
}
