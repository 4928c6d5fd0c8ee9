package adminapi

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// ruleInput is a PUT body.
type ruleInput struct {
	identity
	MaxRequests     *int64    `json:"max_requests"`
	MaxTokens       *int64    `json:"max_tokens"`
	MaxInputTokens  *int64    `json:"max_input_tokens"`
	MaxOutputTokens *int64    `json:"max_output_tokens"`
	Capacity        *int64    `json:"capacity"`
	RefillPerSecond *float64  `json:"refill_per_second"`
	Window          string    `json:"window"`
	Quota           string    `json:"quota"`
	Priority        int       `json:"priority"`
	Always          bool      `json:"always"`
	Shadow          bool      `json:"shadow"`
	PerChild        bool      `json:"per_child"`
	Shards          int       `json:"shards"`
	Ramp            *rampJSON `json:"ramp"`
	FairShare       *fairJSON `json:"fair_share"`
	Version         int64     `json:"version"`
	From            *identity `json:"from"`
}

// rampJSON is a ramp as the API takes it: where it ends is the rule's
// limit.
type rampJSON struct {
	Start int64  `json:"start"`
	Step  int64  `json:"step"`
	Every string `json:"every"`
	Max   int64  `json:"max,omitempty"`
}

type fairJSON struct {
	By            string           `json:"by"`
	Weights       map[string]int64 `json:"weights,omitempty"`
	DefaultWeight int64            `json:"default_weight,omitempty"`
	MaxMembers    int              `json:"max_members,omitempty"`
}

// ruleView is a rule as the API shows it.
type ruleView struct {
	ID              string     `json:"id"`
	Scope           string     `json:"scope"`
	Subject         string     `json:"subject"`
	LimitKey        limitKey   `json:"limit_key"`
	MaxRequests     int64      `json:"max_requests"`
	MaxTokens       int64      `json:"max_tokens"`
	MaxInputTokens  int64      `json:"max_input_tokens"`
	MaxOutputTokens int64      `json:"max_output_tokens"`
	Capacity        int64      `json:"capacity,omitempty"`
	RefillPerSecond float64    `json:"refill_per_second,omitempty"`
	Unit            string     `json:"unit,omitempty"`
	Window          string     `json:"window,omitempty"`
	Quota           string     `json:"quota,omitempty"`
	Priority        int        `json:"priority,omitempty"`
	Always          bool       `json:"always,omitempty"`
	Shadow          bool       `json:"shadow,omitempty"`
	PerChild        bool       `json:"per_child"`
	Shards          int        `json:"shards,omitempty"`
	Ramp            *rampJSON  `json:"ramp,omitempty"`
	FairShare       *fairJSON  `json:"fair_share,omitempty"`
	Source          string     `json:"source"`
	Version         int64      `json:"version,omitempty"`
	UpdatedAt       *time.Time `json:"updated_at,omitempty"`
	Usage           *UsageView `json:"usage"`
	Note            string     `json:"note,omitempty"`
}

func viewOf(r limiter.Rule, version int64, updated time.Time) ruleView {
	v := ruleView{
		ID: r.ID(), Scope: r.Scope.String(), Subject: r.Subject, LimitKey: limitKeyOf(r),
		Priority: r.Priority, Always: r.Always, Shadow: r.Shadow,
		PerChild: r.PerChild, Shards: r.Shards, Source: r.Source.String(), Version: version,
	}
	switch l := r.Limit.(type) {
	case limiter.Window:
		v.MaxRequests, v.MaxTokens, v.MaxInputTokens, v.MaxOutputTokens = l.MaxRequests, l.MaxTokens, l.MaxInputTokens, l.MaxOutputTokens
		v.Window, v.Quota = windowName(l), quotaName(l)
	case limiter.Gauge:
		v.MaxRequests = l.MaxInFlight
	case limiter.Bucket:
		v.Capacity, v.RefillPerSecond, v.Unit = l.Capacity, l.RefillPerSecond, "requests"
		if l.Tokens {
			v.Unit = "tokens"
		}
	}
	v.Ramp, v.FairShare = rampJSONOf(r.Ramp), fairJSONOf(r.FairShare)
	if !updated.IsZero() {
		v.UpdatedAt = &updated
	}
	if r.PerChild {
		v.Note = map[limiter.Scope]string{
			limiter.ScopeUserPath: "counted per child path; a child's live usage is at GET /v1/usage",
			limiter.ScopeTag:      "counted per value of the tag; a value's live usage is at GET /v1/usage",
			limiter.ScopeKey:      "counted per key; a key's live usage is at GET /v1/usage with that key",
		}[r.Scope]
	}
	return v
}

// UsageView is one rule's live state.
type UsageView struct {
	Requests     *DimensionView `json:"requests,omitempty"`
	Tokens       *DimensionView `json:"tokens,omitempty"`
	InputTokens  *DimensionView `json:"input_tokens,omitempty"`
	OutputTokens *DimensionView `json:"output_tokens,omitempty"`
	InFlight     *DimensionView `json:"in_flight,omitempty"`
	WindowStart  *time.Time     `json:"window_start,omitempty"`
	WindowEnd    *time.Time     `json:"window_end,omitempty"`
}

// DimensionView is one counter's live state.
type DimensionView struct {
	Limit     int64 `json:"limit"`
	Used      int64 `json:"used"`
	Previous  int64 `json:"previous_window,omitempty"`
	Remaining int64 `json:"remaining"`
	RefillMS  int64 `json:"refill_ms,omitempty"`
}

// UsageOf renders a rule's live state.
func UsageOf(u limiter.RuleUsage) *UsageView {
	v := &UsageView{}
	if !u.WindowStart.IsZero() {
		s, e := u.WindowStart.UTC(), u.WindowEnd.UTC()
		v.WindowStart, v.WindowEnd = &s, &e
	}
	for _, d := range u.Dimensions {
		dv := &DimensionView{Limit: d.Limit, Used: d.Used, Previous: d.Previous, Remaining: d.Remaining, RefillMS: d.Refill.Milliseconds()}
		switch d.Kind {
		case limiter.KindRequests:
			v.Requests = dv
		case limiter.KindTokens:
			v.Tokens = dv
		case limiter.KindInputTokens:
			v.InputTokens = dv
		case limiter.KindOutputTokens:
			v.OutputTokens = dv
		case limiter.KindInFlight:
			v.InFlight = dv
		}
	}
	return v
}

// build checks a rule body and returns the rule it describes: the rule
// base names (from the URL) with the body's limits, or, with no base, the
// rule the body names.
func (in *ruleInput) build(base *limiter.Rule, errs *[]fieldError) limiter.Rule {
	rule := in.identity.ruleOr(base, errs, false)
	if in.Period != nil && base == nil && in.ID == "" {
		*errs = append(*errs, fieldError{Field: "period", Message: "use limit_key"})
	}
	rule.PerChild = rule.PerChild || in.PerChild
	rule.Shards, rule.Source = in.Shards, limiter.SourceManual
	rule.Priority, rule.Always, rule.Shadow = in.Priority, in.Always, in.Shadow
	rule.Ramp, rule.FairShare = nil, nil
	if f := in.FairShare; f != nil {
		rule.FairShare = &limiter.FairShare{By: f.By, Weights: f.Weights, DefaultWeight: f.DefaultWeight, MaxMembers: f.MaxMembers}
	}
	if p := in.Ramp; p != nil {
		every, err := time.ParseDuration(p.Every)
		if err != nil {
			*errs = append(*errs, fieldError{Field: "ramp.every", Message: fmt.Sprintf("%q is not a duration", p.Every)})
		}
		limit := cmp.Or(deref(in.MaxRequests), deref(in.MaxTokens))
		if p.Max != 0 && p.Max != limit {
			*errs = append(*errs, fieldError{Field: "ramp.max", Message: "the ramp ends at the rule's limit: leave it out"})
		}
		rule.Ramp = &limiter.Ramp{Start: p.Start, Step: p.Step, Every: every, Max: limit}
	}
	w := in.window(errs)
	switch l := rule.Limit.(type) {
	case limiter.Bucket:
		rule.Limit = in.bucket(l.Tokens, w, errs)
	case limiter.Gauge:
		in.needMaxima(errs)
		rule.Limit = limiter.Gauge{MaxInFlight: w.MaxRequests}
		*errs = append(*errs, fieldErrors(limiter.Misplaced(w, l))...)
	case limiter.Window:
		in.needMaxima(errs)
		w.Period = l.Period
		rule.Limit = w
	default: // the body named no period: its limits are checked all the same
		in.needMaxima(errs)
		*errs = append(*errs, fieldErrors(w.LimitProblems())...)
	}
	return rule
}

// window is the body's window fields, with no period.
func (in *ruleInput) window(errs *[]fieldError) limiter.Window {
	w := limiter.Window{
		MaxRequests: deref(in.MaxRequests), MaxTokens: deref(in.MaxTokens),
		MaxInputTokens: deref(in.MaxInputTokens), MaxOutputTokens: deref(in.MaxOutputTokens),
	}
	var err error
	if w.Fixed, err = limiter.ParseWindow(in.Window); err != nil {
		*errs = append(*errs, fieldError{Field: "window", Message: err.Error()})
	}
	if w.Quota, err = limiter.ParseQuota(in.Quota); err != nil {
		*errs = append(*errs, fieldError{Field: "quota", Message: err.Error()})
	}
	return w
}

// bucket is the body's bucket: its capacity and refill, and no window
// fields.
func (in *ruleInput) bucket(tokens bool, w limiter.Window, errs *[]fieldError) limiter.Bucket {
	b := limiter.Bucket{Tokens: tokens}
	if in.Capacity == nil || in.RefillPerSecond == nil {
		*errs = append(*errs, fieldError{Field: "capacity", Message: "a bucket needs capacity and refill_per_second"})
	} else {
		b.Capacity, b.RefillPerSecond = *in.Capacity, *in.RefillPerSecond
	}
	if in.MaxRequests != nil || in.MaxTokens != nil || in.MaxInputTokens != nil || in.MaxOutputTokens != nil {
		*errs = append(*errs, fieldError{Field: "max_requests", Message: "a bucket has a capacity and a refill, not window limits"})
	}
	*errs = append(*errs, fieldErrors(limiter.Misplaced(limiter.Window{Fixed: w.Fixed, Quota: w.Quota}, b))...)
	return b
}

// needMaxima asks a window's or a gauge's body for a limit, and no
// bucket's fields.
func (in *ruleInput) needMaxima(errs *[]fieldError) {
	if in.MaxRequests == nil && in.MaxTokens == nil && in.MaxInputTokens == nil && in.MaxOutputTokens == nil {
		*errs = append(*errs, fieldError{Field: "max_requests", Message: "give at least one of max_requests, max_tokens, max_input_tokens, max_output_tokens (or a bucket's capacity)"})
	}
	if in.Capacity != nil || in.RefillPerSecond != nil {
		*errs = append(*errs, fieldError{Field: "capacity", Message: `a bucket's limit_key is {"period": "bucket"}`})
	}
}

// windowName and quotaName are a window's window and quota fields: set
// only when not the default.
func windowName(w limiter.Window) string {
	if w.Fixed {
		return w.Counting()
	}
	return ""
}

func quotaName(w limiter.Window) string {
	if w.Quota != limiter.QuotaStandard {
		return w.Quota.String()
	}
	return ""
}

func (in *ruleInput) version() int64     { return in.Version }
func (in *ruleInput) from() *identity    { return in.From }
func (in *ruleInput) names() *identity   { return &in.identity }
func (in *ruleInput) setVersion(v int64) { in.Version = v }

// ruleInputOf is a rule's limits as a body: what a PATCH starts from.
func ruleInputOf(r limiter.Rule) input {
	in := &ruleInput{PerChild: r.PerChild, Shards: r.Shards, Priority: r.Priority, Always: r.Always, Shadow: r.Shadow,
		Ramp: rampJSONOf(r.Ramp), FairShare: fairJSONOf(r.FairShare)}
	if in.Ramp != nil {
		in.Ramp.Max = 0 // it ends at the limit, which the patch may change
	}
	var w limiter.Window
	switch l := r.Limit.(type) {
	case limiter.Bucket:
		c, f := l.Capacity, l.RefillPerSecond
		in.Capacity, in.RefillPerSecond = &c, &f
		return in
	case limiter.Gauge:
		w.MaxRequests = l.MaxInFlight
	case limiter.Window:
		w = l
		in.Window, in.Quota = windowName(l), quotaName(l)
	}
	for _, f := range []struct {
		v   int64
		dst **int64
	}{{w.MaxRequests, &in.MaxRequests}, {w.MaxTokens, &in.MaxTokens}, {w.MaxInputTokens, &in.MaxInputTokens}, {w.MaxOutputTokens, &in.MaxOutputTokens}} {
		if f.v != 0 {
			v := f.v
			*f.dst = &v
		}
	}
	return in
}

var rules = &kind{
	what: "rule", collection: "/admin/rate-limits", listKey: "rate_limits",
	newInput: func() input { return &ruleInput{} },
	inputOf:  ruleInputOf,
	view:     func(r limiter.Rule, v int64, at time.Time) any { return viewOf(r, v, at) },
	viewWithUsage: func(r limiter.Rule, v int64, at time.Time, u *limiter.RuleUsage) any {
		view := viewOf(r, v, at)
		if u != nil {
			view.Usage = UsageOf(*u)
		}
		return view
	},
}

// withProblems adds a rule's own problems to errs, but for fields errs
// already names: every problem of a request is reported at once. A body
// with problems already may name no limit (its period did not parse):
// that is not one more.
func withProblems(errs []fieldError, rule limiter.Rule) []fieldError {
	named := map[string]bool{"limit": len(errs) > 0}
	for _, e := range errs {
		named[e.Field] = true
		if f, _, ok := strings.Cut(e.Field, "."); ok {
			named[f] = true
		}
	}
	for _, e := range fieldErrors(rule.Problems()) {
		if !named[e.Field] {
			errs = append(errs, e)
		}
	}
	return errs
}

// fieldErrors are problems written "field: why" as the API reports them.
func fieldErrors(problems []error) []fieldError {
	var out []fieldError
	for _, e := range problems {
		field, msg, ok := strings.Cut(e.Error(), ": ")
		if !ok {
			field, msg = "rule", e.Error()
		}
		out = append(out, fieldError{Field: field, Message: msg})
	}
	return out
}

func (h *Handler) resetAll(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Confirmation string `json:"confirmation"`
	}
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if in.Confirmation != "reset" {
		invalid(w, []fieldError{{Field: "confirmation", Message: `must be "reset"`}})
		return
	}
	var keys []limiter.RuleKey
	for _, rl := range h.cfg.Limiter.Rules().List() {
		keys = append(keys, rl.Key())
	}
	snap, err := h.cfg.Store.Snapshot(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	for _, m := range snap.Rules {
		if !slices.Contains(keys, m.Key()) {
			keys = append(keys, m.Key())
		}
	}
	if err := h.cfg.Store.Regenerate(r.Context(), keys); err != nil {
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info("all rule counters reset", "rules", len(keys))
	h.record(r, "*", "", nil, map[string]any{"reset": len(keys)})
	writeJSON(w, http.StatusOK, map[string]any{"reset": len(keys)})
}

// reload makes this instance's limiter see a change at once (others see
// it within the watcher's interval).
func (h *Handler) reload(r *http.Request) {
	if err := h.cfg.Watcher.Load(r.Context()); err != nil {
		h.log.Error("could not reload the rules after a change", "err", err)
	}
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func rampJSONOf(p *limiter.Ramp) *rampJSON {
	if p == nil {
		return nil
	}
	return &rampJSON{Start: p.Start, Step: p.Step, Every: p.Every.String(), Max: p.Max}
}

func fairJSONOf(f *limiter.FairShare) *fairJSON {
	if f == nil {
		return nil
	}
	return &fairJSON{By: f.By, Weights: f.Weights, DefaultWeight: f.DefaultWeight, MaxMembers: f.MaxMembers}
}
