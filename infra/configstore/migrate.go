package configstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MigrationPlan is a migration as configured, as the watcher steps it.
type MigrationPlan struct {
	Name, From, To, Scope string
	// Start, Step and Max are in hundredths of a percent.
	Start, Step, Max int64
	Every            time.Duration
}

// ShareOf is the share in force when the migration stands at s: its start
// until an instance wrote it first.
func (p MigrationPlan) ShareOf(s MigrationState) int64 {
	if s.V == 0 {
		return p.Start
	}
	return s.Share
}

// MigrationJudge says, of what a migration's target answered over its
// last interval, why to hold the share ("" to let it grow) and why to roll
// it back ("" not to).
type MigrationJudge func(name string, c MigrationCounts) (hold, rollback string)

// MigrationInterval names an interval of a migration: its name and when
// the interval began (MigrationState.At).
type MigrationInterval struct {
	Name string
	At   time.Time
}

// Migrators step migrations and add up what their targets answered; both
// stores do.
type Migrators interface {
	StepMigration(ctx context.Context, name string, from, to MigrationState) error
	AddMigrationCounts(ctx context.Context, name string, at time.Time, c MigrationCounts) error
	MigrationCounts(ctx context.Context, name string, at time.Time) (MigrationCounts, error)
}

var (
	_ Migrators = (*Memory)(nil)
	_ Migrators = (*Dynamo)(nil)
)

// migrationWatch is what the watcher knows of migrations.
type migrationWatch struct {
	plans []MigrationPlan
	judge MigrationJudge
	// drain returns what this instance counted since it was last asked.
	drain func() map[MigrationInterval]MigrationCounts
}

// WatchMigrations makes the watcher step plans when their interval is
// over, after adding what this instance counted (drain) to the store, by
// judge's verdict on the interval's counts of every instance.
func (w *Watcher) WatchMigrations(plans []MigrationPlan, judge MigrationJudge, drain func() map[MigrationInterval]MigrationCounts) {
	w.mig = migrationWatch{plans: plans, judge: judge, drain: drain}
}

// MigrationPlans are the migrations the watcher steps.
func (w *Watcher) MigrationPlans() []MigrationPlan { return w.mig.plans }

// Migrations returns where the migrations stood when the rules were last
// loaded, by name (a migration never written is absent).
func (w *Watcher) Migrations() map[string]MigrationState {
	if s := w.snap.Load(); s != nil {
		return s.Migrations
	}
	return nil
}

// stepMigrations adds this instance's counts to the store and takes the
// steps that are due; it reports whether the store's version moved.
func (w *Watcher) stepMigrations(ctx context.Context, now time.Time) bool {
	m, ok := w.src.(Migrators)
	if !ok || len(w.mig.plans) == 0 {
		return false
	}
	if w.mig.drain != nil {
		for iv, c := range w.mig.drain() {
			if err := m.AddMigrationCounts(ctx, iv.Name, iv.At, c); err != nil {
				w.log.Warn("could not add a migration's counts; they are lost", "migration", iv.Name, "err", err)
			}
		}
	}
	states := w.Migrations()
	moved := false
	for _, p := range w.mig.plans {
		st := states[p.Name]
		next, due := w.nextMigration(ctx, m, p, st, now)
		if !due {
			continue
		}
		switch err := m.StepMigration(ctx, p.Name, st, next); {
		case err == nil:
			moved = true
			w.log.Info("migration stepped", "migration", p.Name, "from", st.Share, "to", next.Share, "holding", next.Holding,
				"rolled_back", next.RolledBack)
		case errors.Is(err, ErrMigrationMoved):
			moved = true // another instance stepped first
		default:
			w.log.Warn("could not step a migration", "migration", p.Name, "err", err)
		}
	}
	return moved
}

// nextMigration is where migration p, standing at st, goes at now, and
// whether it is due to go there: started at its start; at the end of an
// interval rolled back, held or grown by the judge's verdict.
func (w *Watcher) nextMigration(ctx context.Context, m Migrators, p MigrationPlan, st MigrationState, now time.Time) (MigrationState, bool) {
	if st.V == 0 {
		return st.Then(now, p.Start, "started"), true
	}
	if st.Paused || st.RolledBack || now.Before(st.At.Add(p.Every)) {
		return st, false
	}
	c, err := m.MigrationCounts(ctx, p.Name, st.At)
	if err != nil {
		w.log.Warn("could not read a migration's counts; holding it", "migration", p.Name, "err", err)
		return st, false
	}
	hold, rollback := "", ""
	if w.mig.judge != nil {
		hold, rollback = w.mig.judge(p.Name, c)
	}
	var n MigrationState
	switch {
	case rollback != "":
		n = st.Then(now, 0, "rolled back: "+rollback)
		n.RolledBack = true
		w.log.Warn("migration rolled back", "migration", p.Name, "why", rollback)
	case hold != "":
		n = st.Then(now, st.Share, "held: "+hold)
	case st.Share >= p.Max:
		n = st // a new interval at its maximum, no step to record
		n.At, n.V = now.UTC(), st.V+1
	default:
		n = st.Then(now, min(st.Share+p.Step, p.Max), "stepped")
	}
	n.Holding = hold
	return n, true
}

// Migration actions of the admin API.
const (
	MigrationPause    = "pause"
	MigrationResume   = "resume"
	MigrationRollback = "rollback"
)

// ControlMigration pauses, resumes or rolls back migration name at now
// (why says who and why), by a conditional write retried on a race, then
// reloads, so that this instance draws with the new share at once and the
// others within the watcher's interval. A resumed migration that was
// rolled back starts again at its start.
func (w *Watcher) ControlMigration(ctx context.Context, name, action, why string, now time.Time) (MigrationState, error) {
	m, ok := w.src.(Migrators)
	var plan *MigrationPlan
	for i := range w.mig.plans {
		if w.mig.plans[i].Name == name {
			plan = &w.mig.plans[i]
		}
	}
	if !ok || plan == nil {
		return MigrationState{}, ErrNotFound
	}
	for range 5 {
		snap, err := w.src.Snapshot(ctx)
		if err != nil {
			return MigrationState{}, err
		}
		st := snap.Migrations[name]
		var n MigrationState
		switch action {
		case MigrationPause:
			n = st.Then(now, plan.ShareOf(st), "paused: "+why)
			n.Paused = true
		case MigrationResume:
			share := plan.ShareOf(st)
			if st.RolledBack {
				share = plan.Start
			}
			n = st.Then(now, share, "resumed: "+why)
			n.Paused, n.RolledBack = false, false
		case MigrationRollback:
			n = st.Then(now, 0, "rolled back: "+why)
			n.Paused, n.RolledBack = false, true
		default:
			return MigrationState{}, fmt.Errorf("no migration action %q", action)
		}
		n.Holding = ""
		switch err := m.StepMigration(ctx, name, st, n); {
		case errors.Is(err, ErrMigrationMoved):
			continue
		case err != nil:
			return MigrationState{}, err
		}
		return n, w.Load(ctx)
	}
	return MigrationState{}, ErrMigrationMoved
}
