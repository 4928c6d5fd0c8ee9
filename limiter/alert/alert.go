// Package alert decides which alerts hold at an instant, from what the
// rules use and what the last minutes counted: use of a rule or budget
// against its limit, a budget's burn-rate forecast, refusal spikes,
// upstream 429s after admission, class waits growing, and estimates far
// from usage. It is pure: the instant is a parameter, the readings are
// given, nothing is stored or sent here. Who fires an alert once across
// the fleet, and who delivers it, is the caller's (functions/app).
package alert

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Config is what to watch (the alerts section of the YAML).
type Config struct {
	// Rules are thresholds of use against a limit.
	Rules []Rule
	// Forecast watches every budget: one that will run out before its
	// period ends, at the rate of the last ForecastWindow, alerts with the
	// predicted instant.
	Forecast bool
	// RefusalSpike alerts when a rule refuses at least this many requests
	// in a minute (0: off).
	RefusalSpike float64
	// Upstream429Rate alerts when a provider answers 429 to at least this
	// share of the requests the gateway admitted to it over RateWindow (at
	// least MinAdmissions of them; 0: off): a limit set above what the
	// provider enforces.
	Upstream429Rate float64
	// EstimateFactor alerts when a route's tokens used over ForecastWindow
	// are more than this factor of what was reserved for them (limits can
	// be overrun), or less than its inverse (quota stranded); 0: off.
	EstimateFactor float64
	// ClassWaits alerts when a class's waits grow.
	ClassWaits ClassWaits
}

// Rule is thresholds on one rule or budget, or on every one.
type Rule struct {
	// On is a rule's or budget's id (user_path:/team:minute,
	// budget:user_path:/team/a:month), or "any".
	On string `json:"on"`
	// At are fractions of the limit, each its own alert.
	At []float64 `json:"at"`
}

// ClassWaits alerts when a class's waits over RateWindow average at least
// PerMinute a minute and at least Factor times the RateWindow before (0:
// off).
type ClassWaits struct {
	Factor    float64
	PerMinute float64
}

// Any is the On of a threshold on every rule and budget.
const Any = "any"

// The windows the readings are taken over.
const (
	// ForecastWindow is the rate a forecast extrapolates, and the window
	// of the estimate error.
	ForecastWindow = 15 * time.Minute
	// RateWindow is the window of the 429 rate and of class waits.
	RateWindow = 5 * time.Minute
	// MinAdmissions is the fewest admissions a 429 rate is taken over.
	MinAdmissions = 20
	// MinReservedTokens is the fewest reserved tokens an estimate error is
	// taken over.
	MinReservedTokens = 1000
	// Hysteresis is how far below its threshold a firing alert's value
	// must fall before it resolves, as a share of the threshold, so that
	// a value hovering at the threshold does not fire and resolve by turns.
	Hysteresis = 0.1
)

// Kinds of alert.
const (
	KindUse          = "use"
	KindForecast     = "forecast"
	KindRefusalSpike = "refusal_spike"
	KindUpstream429  = "upstream_429"
	KindClassWaits   = "class_waits"
	KindEstimate     = "estimate_error"
)

// Problems lists what is wrong with the configuration, each "field: why".
func (c Config) Problems() []string {
	var out []string
	for i, r := range c.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		if r.On == "" {
			out = append(out, at+".on: required: a rule or budget id, or any")
		} else if r.On != Any {
			if _, err := limiter.ParseRuleID(r.On); err != nil {
				out = append(out, at+".on: "+err.Error())
			}
		}
		if len(r.At) == 0 {
			out = append(out, at+".at: give at least one fraction of the limit (0.8 is 80 %)")
		}
		for j, f := range r.At {
			if !(f > 0 && f <= 10) {
				out = append(out, fmt.Sprintf("%s.at[%d]: %v is not a fraction of the limit above 0 (0.8 is 80 %%, at most 10)", at, j, f))
			}
		}
	}
	for _, f := range []struct {
		name string
		v    float64
		ok   bool
	}{
		{"refusal_spike.per_minute", c.RefusalSpike, c.RefusalSpike >= 0},
		{"upstream_429_after_admission.rate", c.Upstream429Rate, c.Upstream429Rate >= 0 && c.Upstream429Rate <= 1},
		{"estimate_error.factor", c.EstimateFactor, c.EstimateFactor == 0 || c.EstimateFactor > 1},
		{"class_waits.factor", c.ClassWaits.Factor, c.ClassWaits.Factor == 0 || c.ClassWaits.Factor >= 1},
		{"class_waits.per_minute", c.ClassWaits.PerMinute, c.ClassWaits.PerMinute >= 0},
	} {
		if !f.ok || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			out = append(out, fmt.Sprintf("%s: %v is out of range", f.name, f.v))
		}
	}
	return out
}

// Enabled reports whether anything is watched.
func (c Config) Enabled() bool {
	return len(c.Rules) > 0 || c.Forecast || c.RefusalSpike > 0 || c.Upstream429Rate > 0 || c.EstimateFactor > 0 ||
		(c.ClassWaits.Factor > 0 || c.ClassWaits.PerMinute > 0)
}

// Use is one dimension of one rule's or budget's live use.
type Use struct {
	Rule string // the rule's id
	// Dimension is requests, tokens, input_tokens, output_tokens,
	// in_flight, or usd for a budget (whose amounts are micro-dollars).
	Dimension   string
	Used, Limit int64
	// PeriodStart and PeriodEnd bound the rule's window or the budget's
	// period; zero for in-flight gauges and buckets.
	PeriodStart, PeriodEnd time.Time
	// Earlier is, for a budget, what it had spent at an earlier instant
	// (about ForecastWindow ago), for the forecast; zero when unknown.
	Earlier Sample
}

// Sample is what a budget had spent at an instant.
type Sample struct {
	At   time.Time
	Used int64
}

// Minute is what one minute counted, fleet-wide.
type Minute struct {
	Start time.Time
	// Refusals by rule id.
	Refusals map[string]float64
	// Waits by class.
	Waits map[string]float64
	// Admitted and Upstream429 by provider.
	Admitted, Upstream429 map[string]float64
	// Reserved and Used tokens by route.
	Reserved, Used map[string]float64
}

// Input is what an evaluation reads.
type Input struct {
	Now  time.Time
	Uses []Use
	// Minutes are the last minutes, any order; those that ended by Now
	// count.
	Minutes []Minute
}

// Alert is one alert that holds.
type Alert struct {
	// ID is its identity: kind, subject, dimension and threshold.
	ID        string  `json:"id"`
	Kind      string  `json:"kind"`
	Subject   string  `json:"subject"`
	Dimension string  `json:"dimension,omitempty"`
	Threshold float64 `json:"threshold"`
	// Value is what was measured: a fraction of the limit, a count a
	// minute, a rate or a ratio.
	Value float64 `json:"value"`
	// Used and Limit are a use alert's amounts (micro-dollars for usd).
	Used  int64 `json:"used,omitempty"`
	Limit int64 `json:"limit,omitempty"`
	// Period names the period the alert fires in: it fires once in it.
	Period    string     `json:"period"`
	PeriodEnd *time.Time `json:"period_end,omitempty"`
	// ExhaustsAt is when a forecast budget runs out.
	ExhaustsAt *time.Time `json:"exhausts_at,omitempty"`
	Message    string     `json:"message"`
}

// MakeID is an alert's identity.
func MakeID(kind, subject, dimension string, threshold float64) string {
	return kind + "|" + subject + "|" + dimension + "|" + strconv.FormatFloat(threshold, 'g', -1, 64)
}

// Evaluate returns the alerts that hold at in.Now, sorted by id. active
// names the alerts firing now (fleet-wide): one of them holds until its
// value falls Hysteresis below its threshold.
func Evaluate(cfg Config, in Input, active map[string]bool) []Alert {
	e := evaluation{cfg: cfg, in: in, active: active, hour: in.Now.UTC().Truncate(time.Hour).Format(time.RFC3339)}
	e.uses()
	e.refusalSpikes()
	recent := window(in.Minutes, in.Now, RateWindow)
	if cfg.Upstream429Rate > 0 {
		e.upstream429s(recent)
	}
	if w := cfg.ClassWaits; w.Factor > 0 || w.PerMinute > 0 {
		e.classWaits(recent)
	}
	if cfg.EstimateFactor > 1 {
		e.estimates()
	}
	slices.SortFunc(e.out, func(a, b Alert) int { return strings.Compare(a.ID, b.ID) })
	return e.out
}

// evaluation is one Evaluate: its inputs, the hour the alerts without a
// period of their own fire in, and the alerts found to hold.
type evaluation struct {
	cfg    Config
	in     Input
	active map[string]bool
	hour   string
	out    []Alert
}

// holds adds alert a when value reaches threshold, or, a firing alert,
// until it falls Hysteresis below.
func (e *evaluation) holds(a Alert, value, threshold float64) {
	a.ID = MakeID(a.Kind, a.Subject, a.Dimension, a.Threshold)
	a.Value = value
	// A float's rounding never decides: 7.2 of 10 is 90 % of 80 %.
	const eps = 1e-9
	if value >= threshold-eps || e.active[a.ID] && value >= threshold*(1-Hysteresis)-eps {
		e.out = append(e.out, a)
	}
}

// uses checks each rule's use against its thresholds, and forecasts
// budgets.
func (e *evaluation) uses() {
	for _, u := range e.in.Uses {
		if u.Limit <= 0 {
			continue
		}
		frac := float64(u.Used) / float64(u.Limit)
		period := e.hour
		var end *time.Time
		if !u.PeriodStart.IsZero() {
			pe := u.PeriodEnd.UTC()
			end = &pe
			if u.PeriodEnd.Sub(u.PeriodStart) >= time.Hour {
				period = u.PeriodStart.UTC().Format(time.RFC3339)
			}
		}
		for _, t := range thresholdsOf(e.cfg.Rules, u.Rule) {
			e.holds(Alert{Kind: KindUse, Subject: u.Rule, Dimension: u.Dimension, Threshold: t, Used: u.Used, Limit: u.Limit,
				Period: period, PeriodEnd: end, Message: useMessage(u, frac, t)}, frac, t)
		}
		if e.cfg.Forecast && u.Dimension == "usd" && end != nil {
			if at, ok := Forecast(u.Limit, u.Used, u.Earlier, u.PeriodStart, e.in.Now, u.PeriodEnd); ok {
				a := Alert{Kind: KindForecast, Subject: u.Rule, Dimension: u.Dimension, Used: u.Used, Limit: u.Limit,
					Period: u.PeriodStart.UTC().Format(time.RFC3339), PeriodEnd: end, Value: frac}
				a.ID = MakeID(a.Kind, a.Subject, a.Dimension, 0)
				at = at.UTC().Truncate(time.Second)
				a.ExhaustsAt = &at
				a.Message = fmt.Sprintf("%s will run out at %s, before its period ends at %s, at the last %s's rate ($%s of $%s spent)",
					u.Rule, at.Format(time.RFC3339), end.Format(time.RFC3339), ForecastWindow, limiter.FormatUSD(u.Used), limiter.FormatUSD(u.Limit))
				e.out = append(e.out, a)
			}
		}
	}
}

// refusalSpikes checks the refusals of each rule in the last whole minute.
func (e *evaluation) refusalSpikes() {
	last := lastMinutes(e.in.Minutes, e.in.Now, 1)
	if e.cfg.RefusalSpike > 0 && len(last) == 1 && last[0].Start.Equal(e.in.Now.Truncate(time.Minute).Add(-time.Minute)) {
		for _, rule := range sortedKeys(last[0].Refusals) {
			n := last[0].Refusals[rule]
			e.holds(Alert{Kind: KindRefusalSpike, Subject: rule, Threshold: e.cfg.RefusalSpike, Period: e.hour,
				Message: fmt.Sprintf("%s refused %.0f requests in the minute from %s (alert at %.0f a minute)", rule, n, last[0].Start.UTC().Format("15:04"), e.cfg.RefusalSpike)},
				n, e.cfg.RefusalSpike)
		}
	}
}

// upstream429s checks the share of each provider's admissions it answered
// 429 in recent.
func (e *evaluation) upstream429s(recent []Minute) {
	admitted, limited := sum(recent, func(m Minute) map[string]float64 { return m.Admitted }), sum(recent, func(m Minute) map[string]float64 { return m.Upstream429 })
	for _, p := range sortedKeys(limited) {
		if admitted[p] < MinAdmissions {
			continue
		}
		rate := limited[p] / admitted[p]
		e.holds(Alert{Kind: KindUpstream429, Subject: p, Threshold: e.cfg.Upstream429Rate, Period: e.hour,
			Message: fmt.Sprintf("provider %s answered 429 to %.1f %% of the %.0f requests admitted to it in the last %s (alert at %.1f %%): its limits are below what the gateway admits",
				p, 100*rate, admitted[p], RateWindow, 100*e.cfg.Upstream429Rate)},
			rate, e.cfg.Upstream429Rate)
	}
}

// classWaits checks how often each class waited in recent, against the
// window before.
func (e *evaluation) classWaits(recent []Minute) {
	w := e.cfg.ClassWaits
	now := sum(recent, func(m Minute) map[string]float64 { return m.Waits })
	before := sum(window(e.in.Minutes, e.in.Now.Add(-RateWindow), RateWindow), func(m Minute) map[string]float64 { return m.Waits })
	minutes := RateWindow.Minutes()
	for _, class := range sortedKeys(now) {
		rate, prev := now[class]/minutes, before[class]/minutes
		id := MakeID(KindClassWaits, class, "", w.Factor)
		if rate < w.PerMinute*(1-Hysteresis) || !e.active[id] && rate < w.PerMinute {
			continue // too few waits to call growth
		}
		growth := math.Inf(1)
		if prev > 0 {
			growth = rate / prev
		}
		a := Alert{Kind: KindClassWaits, Subject: class, Threshold: w.Factor, Period: e.hour,
			Message: fmt.Sprintf("class %s waited %.1f times a minute over the last %s, %s the %s before (alert at %.1f× from %.1f a minute)",
				class, rate, RateWindow, growthWords(growth), RateWindow, w.Factor, w.PerMinute)}
		if w.Factor > 0 {
			e.holds(a, math.Min(growth, 1e9), w.Factor)
		} else {
			e.holds(a, rate, w.PerMinute)
		}
	}
}

// estimates checks, per route, the tokens used against those reserved.
func (e *evaluation) estimates() {
	f := e.cfg.EstimateFactor
	span := window(e.in.Minutes, e.in.Now, ForecastWindow)
	reserved, used := sum(span, func(m Minute) map[string]float64 { return m.Reserved }), sum(span, func(m Minute) map[string]float64 { return m.Used })
	for _, route := range sortedKeys(reserved) {
		if reserved[route] < MinReservedTokens {
			continue
		}
		ratio := used[route] / reserved[route]
		off := math.Max(ratio, 1/math.Max(ratio, 1e-9)) // how far from 1, either way
		msg := fmt.Sprintf("route %s used %.2f× the tokens reserved for it over the last %s (alert beyond %.1f× either way): ", route, ratio, ForecastWindow, f)
		if ratio > 1 {
			msg += "estimates are low, so limits can be overrun"
		} else {
			msg += "reservations are high, so quota is stranded until settled"
		}
		e.holds(Alert{Kind: KindEstimate, Subject: route, Threshold: f, Period: e.hour, Message: msg}, off, f)
	}
}

// Forecast says when a budget with limit and used now, which had spent
// earlier.Used at earlier.At, runs out at the rate since then, and
// whether that is before end (the period's end). An earlier sample from
// before the period's start (or none) counts from the start at zero; a
// rate taken over less than a minute, or none, forecasts nothing, as
// does a budget already spent.
func Forecast(limit, used int64, earlier Sample, start, now, end time.Time) (time.Time, bool) {
	if used >= limit || limit <= 0 || !now.Before(end) {
		return time.Time{}, false
	}
	if earlier.At.IsZero() || earlier.At.Before(start) {
		earlier = Sample{At: start}
	}
	span := now.Sub(earlier.At)
	spent := used - earlier.Used
	if span < time.Minute || spent <= 0 {
		return time.Time{}, false
	}
	// rate = spent / span; the rest lasts (limit - used) / rate.
	left := float64(limit-used) / float64(spent) * span.Seconds()
	if left > (100 * 365 * 24 * time.Hour).Seconds() {
		return time.Time{}, false // lasts past any period
	}
	at := now.Add(time.Duration(left * float64(time.Second)))
	return at, at.Before(end)
}

// thresholdsOf returns the thresholds configured for a rule id, from the
// rules naming it and the rules on any, each once.
func thresholdsOf(rules []Rule, id string) []float64 {
	var out []float64
	for _, r := range rules {
		if r.On == Any || strings.EqualFold(r.On, id) {
			for _, t := range r.At {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func useMessage(u Use, frac, t float64) string {
	amount := func(v int64) string {
		if u.Dimension == "usd" {
			return "$" + limiter.FormatUSD(v)
		}
		return strconv.FormatInt(v, 10) + " " + strings.ReplaceAll(u.Dimension, "_", " ")
	}
	return fmt.Sprintf("%s is at %.0f %% of its limit (%s of %s; alert at %.0f %%)", u.Rule, 100*frac, amount(u.Used), amount(u.Limit), 100*t)
}

func growthWords(g float64) string {
	if math.IsInf(g, 1) {
		return "up from none"
	}
	return fmt.Sprintf("%.1f×", g)
}

// lastMinutes returns the n newest minutes that ended by now, newest
// first.
func lastMinutes(ms []Minute, now time.Time, n int) []Minute {
	var done []Minute
	for _, m := range ms {
		if !m.Start.Add(time.Minute).After(now) {
			done = append(done, m)
		}
	}
	slices.SortFunc(done, func(a, b Minute) int { return b.Start.Compare(a.Start) })
	return done[:min(n, len(done))]
}

// window returns the minutes that ended within d before now.
func window(ms []Minute, now time.Time, d time.Duration) []Minute {
	var out []Minute
	for _, m := range ms {
		end := m.Start.Add(time.Minute)
		if !end.After(now) && end.After(now.Add(-d)) {
			out = append(out, m)
		}
	}
	return out
}

func sum(ms []Minute, of func(Minute) map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		for k, v := range of(m) {
			out[k] += v
		}
	}
	return out
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
