package admission

import (
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/learn"
	"github.com/tollgate/tollgate/providers"
)

// A migration is a controlled roll-out of one model in place of another:
// of the requests in its scope whose first choice is From, a fleet-wide
// share (the store steps it; see configstore.Watcher) goes to To instead,
// drawn by a hash of the chosen identity, so that a tenant stays on one
// side within an interval and, as the share only grows, stays on To once
// there. To takes the first choice's place in the order and From stays
// right behind it: a request To cannot take (compat.go, with From as the
// first choice) or that To refuses or fails goes to From. What To answered
// and how long both took is counted for the store's judge of the
// interval (hold_when, rollback_when).

// Migration is a migration as admission draws it.
type Migration struct {
	Name string
	// From and To are "provider/model"; Scope a user path.
	From, To, Scope string
	// Sticky is what a tenant is: user_path, key, tag:<name> or none
	// (each request drawn on its own).
	Sticky string
	// Share is the share in force, in hundredths of a percent; At is when
	// its interval began (what the answers are counted under).
	Share int64
	At    time.Time
}

// MigrationChoice is what a request in a migration's scope was drawn
// for, in explain.
type MigrationChoice struct {
	Name, From, To string
	// Share is the share in force (hundredths of a percent); Migrated
	// whether the request was drawn for To.
	Share    int64
	Migrated bool
}

// MigrationKey names the interval of a migration that counts are for.
type MigrationKey struct {
	Name string
	At   time.Time
}

// MigrationCounts are what a migration's To answered in an interval (as
// configstore.MigrationCounts), latencies in milliseconds.
type MigrationCounts struct {
	Answers, RateLimited, Errors int64
	ToLatency, FromLatency       learn.Histogram
}

// migrationBook is what this instance counted of migrations since the
// store was last given the counts.
type migrationBook struct {
	mu sync.Mutex
	m  map[MigrationKey]*MigrationCounts
}

// DrainMigrationCounts returns what this instance counted since it was
// last asked, and forgets it.
func (o *Orchestrator) DrainMigrationCounts() map[MigrationKey]MigrationCounts {
	b := &o.migrations
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[MigrationKey]MigrationCounts, len(b.m))
	for k, c := range b.m {
		out[k] = *c
	}
	b.m = nil
	return out
}

func (b *migrationBook) add(k MigrationKey, f func(c *MigrationCounts)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[MigrationKey]*MigrationCounts{}
	}
	c := b.m[k]
	if c == nil {
		c = &MigrationCounts{}
		b.m[k] = c
	}
	f(c)
}

// migrate puts the migration's target first in the pass when the
// request is drawn for it (drawn once, on the first pass).
func (a *Admission) migrate() {
	if a.pass == 0 {
		a.mig, a.migTo, a.migrated = a.o.migrationOf(&a.req, a.first)
		if a.mig != nil {
			a.trace.migration(&MigrationChoice{Name: a.mig.Name, From: a.mig.From, To: a.mig.To, Share: a.mig.Share, Migrated: a.migrated})
		}
	}
	if !a.migrated {
		return
	}
	rest := slices.DeleteFunc(slices.Clone(a.targets), func(t providers.Target) bool { return t == a.migTo })
	a.targets = append([]providers.Target{a.migTo}, rest...)
}

// migrationOf is the migration whose scope req is in and whose From is
// first, its To, and whether req is drawn for it.
func (o *Orchestrator) migrationOf(req *Request, first providers.Target) (*Migration, providers.Target, bool) {
	if o.cfg.Migrations == nil || first.Provider == nil {
		return nil, providers.Target{}, false
	}
	for _, m := range o.cfg.Migrations() {
		if !strings.EqualFold(m.From, first.String()) || !limiter.PathWithin(req.Caller.UserPath, m.Scope) {
			continue
		}
		route, ok := o.cfg.Catalog.Resolve(m.To)
		if !ok || len(route.Targets) == 0 {
			continue
		}
		return &m, route.Targets[0], o.drawn(req, &m)
	}
	return nil, providers.Target{}, false
}

// drawn reports whether req falls within m's share: a hash of the
// migration's name and the request's identity, in hundredths of a
// percent, below the share.
func (o *Orchestrator) drawn(req *Request, m *Migration) bool {
	switch {
	case m.Share <= 0:
		return false
	case m.Share >= 10_000:
		return true
	case m.Sticky == "none":
		return o.cfg.Rand()*10_000 < float64(m.Share)
	}
	id := req.Caller.UserPath
	switch c := &req.Caller; {
	case m.Sticky == "key" && c.KeyID != "":
		id = "key:" + c.KeyID
	case strings.HasPrefix(m.Sticky, "tag:"):
		for _, t := range c.Tags {
			if strings.EqualFold(t.Name, m.Sticky[len("tag:"):]) {
				id = "tag:" + t.Value
			}
		}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(m.Name + "\x00" + strings.ToLower(id)))
	return mix(h.Sum64())%10_000 < uint64(m.Share)
}

// mix spreads a hash's bits (SplitMix64's finalizer), so that similar
// identities draw independently.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// migratedTo counts and logs a request admitted on its migration's target.
func (a *Admission) migratedTo(t providers.Target) {
	if a.dry {
		return
	}
	a.o.cfg.Metrics.Count(metrics.Migrated, 1, "Migration", a.mig.Name, "To", t.String())
	a.logf("migrated: admitted on the migration's target", "migration", a.mig.Name, "from", a.mig.From, "to", t.String())
}

// answeredMigration counts how t answered a request in a migration's
// scope: To's answers, failures and latency, From's latency.
func (a *Admission) answeredMigration(t providers.Target, perr *providers.Error) {
	if a.mig == nil || a.dry || a.forwardAt.IsZero() {
		return
	}
	ms := max(a.o.cfg.Now().Sub(a.forwardAt).Milliseconds(), 0)
	switch {
	case a.migrated && t == a.migTo:
		a.o.migrations.add(MigrationKey{Name: a.mig.Name, At: a.mig.At}, func(c *MigrationCounts) {
			c.Answers++
			switch {
			case perr == nil:
				c.ToLatency.Add(ms)
			case perr.RateLimited():
				c.RateLimited++
			default:
				c.Errors++
			}
		})
	case t == a.first && perr == nil:
		a.o.migrations.add(MigrationKey{Name: a.mig.Name, At: a.mig.At}, func(c *MigrationCounts) { c.FromLatency.Add(ms) })
	}
}
