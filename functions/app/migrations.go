package app

import (
	"fmt"
	"math"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/infra/configstore"
)

// watchMigrations makes the watcher step the configured migrations: the
// store keeps their shares, every instance adds what it counted of their
// targets' answers, and the instance that steps judges the interval by
// hold_when and rollback_when.
func (a *App) watchMigrations() {
	specs := a.Config.Migrations
	if len(specs) == 0 {
		return
	}
	plans := make([]configstore.MigrationPlan, len(specs))
	for i, m := range specs {
		plans[i] = configstore.MigrationPlan{Name: m.Name, From: m.From, To: m.To, Scope: m.Scope,
			Start: hundredths(m.Start), Step: hundredths(m.Step), Max: hundredths(m.Max), Every: m.Every}
	}
	a.Watcher.WatchMigrations(plans, migrationJudge(specs), a.drainMigrations)
}

// hundredths is a percent in hundredths of a percent.
func hundredths(pct float64) int64 { return int64(math.Round(pct * 100)) }

// migrationJudge holds a migration while a hold_when threshold is passed
// over the interval, and rolls it back when a rollback_when one is.
func migrationJudge(specs []config.MigrationSpec) configstore.MigrationJudge {
	byName := map[string]config.MigrationSpec{}
	for _, m := range specs {
		byName[m.Name] = m
	}
	return func(name string, c configstore.MigrationCounts) (hold, rollback string) {
		m := byName[name]
		return passed(m.HoldWhen, c), passed(m.RollbackWhen, c)
	}
}

// passed says which threshold of t the counts c pass ("" for none).
func passed(t config.MigrationThresholds, c configstore.MigrationCounts) string {
	if c.Answers > 0 {
		n := float64(c.Answers)
		if r := float64(c.RateLimited) / n; t.Upstream429Rate != nil && r > *t.Upstream429Rate {
			return fmt.Sprintf("upstream_429_rate %.4g above %.4g (%d of %d answers)", r, *t.Upstream429Rate, c.RateLimited, c.Answers)
		}
		if r := float64(c.Errors) / n; t.ErrorRate != nil && r > *t.ErrorRate {
			return fmt.Sprintf("error_rate %.4g above %.4g (%d of %d answers)", r, *t.ErrorRate, c.Errors, c.Answers)
		}
	}
	if t.P95LatencyRatio != nil && c.ToLatency.N() > 0 && c.FromLatency.N() > 0 {
		to, from := c.ToLatency.Quantile(0.95), max(c.FromLatency.Quantile(0.95), 1)
		if r := float64(to) / float64(from); r > *t.P95LatencyRatio {
			return fmt.Sprintf("p95_latency_ratio %.3g above %.3g (p95 %d ms against %d ms)", r, *t.P95LatencyRatio, to, from)
		}
	}
	return ""
}

// drainMigrations hands the watcher what the gateway counted; before it
// is built, nothing.
func (a *App) drainMigrations() map[configstore.MigrationInterval]configstore.MigrationCounts {
	if a.Gateway == nil {
		return nil
	}
	in := a.Gateway.Admission().DrainMigrationCounts()
	out := make(map[configstore.MigrationInterval]configstore.MigrationCounts, len(in))
	for k, c := range in {
		out[configstore.MigrationInterval{Name: k.Name, At: k.At}] = configstore.MigrationCounts(c)
	}
	return out
}

// migrationsInForce are the migrations with the shares the store last
// gave them.
func (a *App) migrationsInForce() []admission.Migration {
	states := a.Watcher.Migrations()
	out := make([]admission.Migration, len(a.Config.Migrations))
	for i, m := range a.Config.Migrations {
		st := states[m.Name]
		share := hundredths(m.Start)
		if st.V > 0 {
			share = st.Share
		}
		out[i] = admission.Migration{Name: m.Name, From: m.From, To: m.To, Scope: m.Scope, Sticky: m.Sticky, Share: share, At: st.At}
	}
	return out
}
