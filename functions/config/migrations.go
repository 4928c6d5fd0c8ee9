package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// MigrationSpec is one migration (migrations[]): a share of the requests
// in Scope whose first choice is From goes to To instead, growing from
// Start by Step every Every up to Max (percent), held while a HoldWhen
// threshold is passed over an interval, dropped to 0 when a RollbackWhen
// one is.
type MigrationSpec struct {
	Name string
	// From and To are "provider/model".
	From, To string
	// Scope is the user path it applies at and below ("/" by default).
	Scope string
	// Start, Step and Max are percents of the tenants in scope, with at
	// most two decimals (0.01 % is the finest share).
	Start, Step, Max float64
	Every            time.Duration
	// Sticky is what a tenant is: user_path (the default), key,
	// tag:<name> (the tag's value) or none (each request drawn on its own).
	Sticky string
	// HoldWhen and RollbackWhen are measured on To over an interval.
	HoldWhen, RollbackWhen MigrationThresholds
}

// MigrationThresholds are bounds on what To answered over an interval;
// nil is no bound.
type MigrationThresholds struct {
	// Upstream429Rate and ErrorRate are fractions of To's answers (0 to
	// 1); P95LatencyRatio is To's p95 latency over From's (at least 1).
	Upstream429Rate, ErrorRate, P95LatencyRatio *float64
}

type migrationYAML struct {
	Name         string          `yaml:"name"`
	From         string          `yaml:"from"`
	To           string          `yaml:"to"`
	Scope        string          `yaml:"scope"`
	Share        *shareYAML      `yaml:"share"`
	Sticky       string          `yaml:"sticky"`
	HoldWhen     *thresholdsYAML `yaml:"hold_when"`
	RollbackWhen *thresholdsYAML `yaml:"rollback_when"`
}

type shareYAML struct {
	Start *float64 `yaml:"start"`
	Step  *float64 `yaml:"step"`
	Every string   `yaml:"every"`
	Max   *float64 `yaml:"max"`
}

type thresholdsYAML struct {
	Upstream429Rate *float64 `yaml:"upstream_429_rate"`
	ErrorRate       *float64 `yaml:"error_rate"`
	P95LatencyRatio *float64 `yaml:"p95_latency_ratio"`
}

// migrationName is what a migration may be called: it is part of the
// admin API's paths and of the store's keys.
var migrationName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// loadMigrations reads the migrations section. It runs after the
// providers are read, so that from and to can be checked against them.
func (cfg *Config) loadMigrations(specs []migrationYAML, at func(...any) string) error {
	var errs []error
	seen := map[string]bool{}
	for i, m := range specs {
		where := at("migrations", i)
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s"+format, append([]any{where}, args...)...))
		}
		switch {
		case m.Name == "":
			bad(": name is missing")
		case !migrationName.MatchString(m.Name):
			bad(".name: %q is not lower-case letters, digits, '-' and '_' (at most 63, a letter or digit first): it is part of the admin API's paths", m.Name)
		case seen[m.Name]:
			bad(".name: %q is defined twice", m.Name)
		}
		seen[m.Name] = true
		for _, f := range []struct{ name, v string }{{"from", m.From}, {"to", m.To}} {
			p, model, ok := strings.Cut(f.v, "/")
			switch {
			case !ok || p == "" || model == "":
				bad(".%s: %q is not provider/model", f.name, f.v)
			case len(cfg.Providers) > 0 && !slices.ContainsFunc(cfg.Providers, func(s ProviderSpec) bool { return strings.EqualFold(s.Name, p) }):
				bad(".%s: %q names no provider", f.name, f.v)
			}
		}
		if m.From != "" && strings.EqualFold(m.From, m.To) {
			bad(": from and to are the same model")
		}
		spec := MigrationSpec{Name: m.Name, From: m.From, To: m.To, Scope: m.Scope, Sticky: m.Sticky, Max: 100}
		if spec.Scope == "" {
			spec.Scope = "/"
		} else if _, err := limiter.ParseUserPath(spec.Scope); err != nil {
			bad(".scope: %v", err)
		}
		switch spec.Sticky {
		case "":
			spec.Sticky = "user_path"
		case "user_path", "key", "none":
		default:
			if t, ok := strings.CutPrefix(spec.Sticky, "tag:"); !ok || t == "" {
				bad(".sticky: %q is not user_path, key, tag:<name> or none", m.Sticky)
			}
		}
		m.Share.into(&spec, bad)
		var err error
		spec.HoldWhen, err = m.HoldWhen.thresholds(where + ".hold_when")
		errs = append(errs, err)
		spec.RollbackWhen, err = m.RollbackWhen.thresholds(where + ".rollback_when")
		errs = append(errs, err)
		cfg.Migrations = append(cfg.Migrations, spec)
	}
	// Two migrations of one model would draw the same requests twice.
	for i, a := range cfg.Migrations {
		for _, b := range cfg.Migrations[:i] {
			if strings.EqualFold(a.From, b.From) && (limiter.PathWithin(a.Scope, b.Scope) || limiter.PathWithin(b.Scope, a.Scope)) {
				errs = append(errs, fmt.Errorf("%s: %s and %s both migrate %s, at %s and %s: give them scopes apart", at("migrations", i),
					b.Name, a.Name, a.From, b.Scope, a.Scope))
			}
		}
	}
	return errors.Join(errs...)
}

// thresholds reads hold_when or rollback_when.
func (t *thresholdsYAML) thresholds(where string) (MigrationThresholds, error) {
	if t == nil {
		return MigrationThresholds{}, nil
	}
	var errs []error
	for _, r := range []struct {
		key string
		v   *float64
	}{{"upstream_429_rate", t.Upstream429Rate}, {"error_rate", t.ErrorRate}} {
		if r.v != nil && (*r.v < 0 || *r.v >= 1 || math.IsNaN(*r.v)) {
			errs = append(errs, fmt.Errorf("%s.%s: %v is not a fraction from 0 to 1 (0.02 is 2 %%)", where, r.key, *r.v))
		}
	}
	if r := t.P95LatencyRatio; r != nil && (*r < 1 || *r > 1000 || math.IsNaN(*r)) {
		errs = append(errs, fmt.Errorf("%s.p95_latency_ratio: %v is not a ratio from 1 to 1000 (to's p95 over from's)", where, *r))
	}
	return MigrationThresholds{Upstream429Rate: t.Upstream429Rate, ErrorRate: t.ErrorRate, P95LatencyRatio: t.P95LatencyRatio}, errors.Join(errs...)
}

// into reads share (percents and an interval) into spec.
func (s *shareYAML) into(spec *MigrationSpec, bad func(format string, args ...any)) {
	if s == nil {
		bad(".share: give {start, step, every} (and max, 100 by default), in percent")
		return
	}
	for _, p := range []struct {
		key string
		v   *float64
		to  *float64
	}{{"start", s.Start, &spec.Start}, {"step", s.Step, &spec.Step}, {"max", s.Max, &spec.Max}} {
		switch {
		case p.v == nil && p.key != "max":
			bad(".share.%s: missing (a percent from 0 to 100)", p.key)
		case p.v == nil:
		case *p.v < 0 || *p.v > 100 || math.IsNaN(*p.v):
			bad(".share.%s: %v is not a percent from 0 to 100", p.key, *p.v)
		case math.Abs(*p.v*100-math.Round(*p.v*100)) > 1e-9:
			bad(".share.%s: %v has more than two decimals (0.01 %% is the finest share)", p.key, *p.v)
		default:
			*p.to = *p.v
		}
	}
	if spec.Start > spec.Max {
		bad(".share: start (%v) is above max (%v)", spec.Start, spec.Max)
	}
	d, err := time.ParseDuration(s.Every)
	switch {
	case s.Every == "":
		bad(".share.every: missing (a duration: 5s, 1h)")
	case err != nil || d < time.Second || d > 31*24*time.Hour:
		bad(".share.every: %q is not a duration from 1s to 744h", s.Every)
	}
	spec.Every = d
}
