package adminapi

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
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
	Priority        int       `json:"priority"`
	Always          bool      `json:"always"`
	Shadow          bool      `json:"shadow"`
	PerChild        bool      `json:"per_child"`
	Shards          int       `json:"shards"`
	Version         int64     `json:"version"`
	From            *identity `json:"from"`
}

// ruleView is a rule as the API shows it.
type ruleView struct {
	Key             string     `json:"key"`
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
	Priority        int        `json:"priority,omitempty"`
	Always          bool       `json:"always,omitempty"`
	Shadow          bool       `json:"shadow,omitempty"`
	PerChild        bool       `json:"per_child"`
	Shards          int        `json:"shards,omitempty"`
	Source          string     `json:"source"`
	Version         int64      `json:"version,omitempty"`
	UpdatedAt       *time.Time `json:"updated_at,omitempty"`
	Usage           *UsageView `json:"usage"`
	Note            string     `json:"note,omitempty"`
}

func viewOf(r limiter.Rule, version int64, updated time.Time) ruleView {
	v := ruleView{
		Key: string(r.Key()), Scope: r.Scope.String(), Subject: r.Subject, LimitKey: limitKeyOf(r),
		MaxRequests: r.MaxRequests, MaxTokens: r.MaxTokens, MaxInputTokens: r.MaxInputTokens, MaxOutputTokens: r.MaxOutputTokens,
		Priority: r.Priority, Always: r.Always, Shadow: r.Shadow,
		PerChild: r.PerChild, Shards: r.Shards, Source: r.Source.String(), Version: version,
	}
	if r.Window == limiter.WindowFixed {
		v.Window = r.Window.String()
	}
	if b := r.Bucket; b != nil {
		v.Capacity, v.RefillPerSecond, v.Unit = b.Capacity, b.RefillPerSecond, "requests"
		if b.Tokens {
			v.Unit = "tokens"
		}
	}
	if !updated.IsZero() {
		v.UpdatedAt = &updated
	}
	if r.PerChild {
		v.Note = "counted per child path; a child's live usage is at GET /v1/usage"
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

func (h *Handler) listRules(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	snap, err := h.cfg.Store.Snapshot(ctx)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	if err := h.cfg.Watcher.Load(ctx); err != nil {
		h.storeFailed(w, err)
		return
	}
	usage := map[limiter.RuleKey]limiter.RuleUsage{}
	live, err := h.cfg.Limiter.AllUsage(ctx, h.cfg.Now())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	for _, u := range live {
		usage[u.Rule.Key()] = u
	}
	out := []ruleView{}
	for _, cr := range h.cfg.ConfigRules {
		if !cr.IsBudget() {
			out = append(out, viewOf(cr, 0, time.Time{}))
		}
	}
	for _, m := range snap.Rules {
		if _, shadowed := h.config[m.Key()]; !shadowed && !m.IsBudget() {
			out = append(out, viewOf(m.Rule, m.Version, m.UpdatedAt))
		}
	}
	for i := range out {
		if u, ok := usage[limiter.RuleKey(out[i].Key)]; ok {
			out[i].Usage = UsageOf(u)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"rate_limits": out, "version": snap.Version})
}

func (h *Handler) putRule(w http.ResponseWriter, r *http.Request) {
	var in ruleInput
	if !decode(w, r, &in) {
		return
	}
	var errs []fieldError
	rule := in.identity.rule("", &errs, false)
	if in.Period != nil {
		errs = append(errs, fieldError{Field: "period", Message: "use limit_key"})
	}
	rule.PerChild = rule.PerChild || in.PerChild
	rule.Shards, rule.Source = in.Shards, limiter.SourceManual
	rule.Priority, rule.Always, rule.Shadow = in.Priority, in.Always, in.Shadow
	var err error
	if rule.Window, err = limiter.ParseWindow(in.Window); err != nil {
		errs = append(errs, fieldError{Field: "window", Message: err.Error()})
	}
	if rule.Bucket != nil {
		if in.Capacity == nil || in.RefillPerSecond == nil {
			errs = append(errs, fieldError{Field: "capacity", Message: "a bucket needs capacity and refill_per_second"})
		} else {
			rule.Bucket.Capacity, rule.Bucket.RefillPerSecond = *in.Capacity, *in.RefillPerSecond
		}
		if in.MaxRequests != nil || in.MaxTokens != nil || in.MaxInputTokens != nil || in.MaxOutputTokens != nil {
			errs = append(errs, fieldError{Field: "max_requests", Message: "a bucket has a capacity and a refill, not window limits"})
		}
	} else {
		rule.MaxRequests, rule.MaxTokens = deref(in.MaxRequests), deref(in.MaxTokens)
		rule.MaxInputTokens, rule.MaxOutputTokens = deref(in.MaxInputTokens), deref(in.MaxOutputTokens)
		if in.MaxRequests == nil && in.MaxTokens == nil && in.MaxInputTokens == nil && in.MaxOutputTokens == nil {
			errs = append(errs, fieldError{Field: "max_requests", Message: "give at least one of max_requests, max_tokens, max_input_tokens, max_output_tokens (or a bucket's capacity)"})
		}
		if in.Capacity != nil || in.RefillPerSecond != nil {
			errs = append(errs, fieldError{Field: "capacity", Message: `a bucket's limit_key is {"period": "bucket"}`})
		}
	}
	if in.Version < 0 {
		errs = append(errs, fieldError{Field: "version", Message: "must not be negative"})
	}
	from := limiter.RuleKey("")
	if in.From != nil {
		from = in.From.rule("from.", &errs, false).Key()
	}
	errs = withProblems(errs, rule)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	h.saveRule(w, r, rule, from, in.Version, "rule", func(cr configstore.Rule) any { return viewOf(cr.Rule, cr.Version, cr.UpdatedAt) })
}

// withProblems adds a rule's own problems to errs, but for fields errs
// already names: every problem of a request is reported at once.
func withProblems(errs []fieldError, rule limiter.Rule) []fieldError {
	named := map[string]bool{}
	for _, e := range errs {
		named[e.Field] = true
		if f, _, ok := strings.Cut(e.Field, "."); ok {
			named[f] = true
		}
	}
	for _, e := range rule.Problems() {
		field, msg, ok := strings.Cut(e.Error(), ": ")
		if !ok {
			field, msg = "rule", e.Error()
		}
		if !named[field] {
			errs = append(errs, fieldError{Field: field, Message: msg})
		}
	}
	return errs
}

// saveRule writes a checked rule or budget (what names it in messages),
// moved from the key from if that is set, at version (0: whatever is
// there now), and answers with view of what was saved.
func (h *Handler) saveRule(w http.ResponseWriter, r *http.Request, rule limiter.Rule, from limiter.RuleKey, version int64, what string, view func(configstore.Rule) any) {
	key := rule.Key()
	for _, k := range []limiter.RuleKey{key, from} {
		if _, isConfig := h.config[k]; isConfig && k != "" {
			writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s comes from the configuration and is read-only here", what, k), nil)
			return
		}
	}
	ctx := r.Context()
	if from == "" {
		from = key
	}
	if version == 0 {
		// No version: create, or update what is there now (the write is
		// still conditional on that version, so a concurrent edit wins or
		// loses as a whole).
		if cur, ok := h.current(w, r, from); !ok {
			return
		} else if cur != nil {
			version = cur.Version
		}
	}
	saved, err := h.cfg.Store.PutRule(ctx, configstore.Rule{Rule: rule}, from, version)
	var conflict *configstore.ConflictError
	switch {
	case errors.As(err, &conflict):
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s changed meanwhile (now version %d); read it and send that version", what, conflict.Current.Key(), conflict.Current.Version),
			map[string]any{"current": view(conflict.Current)})
		return
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", what, from), nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	status, verb := http.StatusOK, "updated"
	switch {
	case saved.Version == 1:
		status, verb = http.StatusCreated, "created"
	case from != key:
		verb = "moved"
	}
	h.log.Info(what+" "+verb, "rule", string(key), "from", string(from), "version", saved.Version)
	writeJSON(w, status, view(saved))
}

// current returns the manual rule at k, or nil.
func (h *Handler) current(w http.ResponseWriter, r *http.Request, k limiter.RuleKey) (*configstore.Rule, bool) {
	snap, err := h.cfg.Store.Snapshot(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return nil, false
	}
	for _, m := range snap.Rules {
		if m.Key() == k {
			return &m, true
		}
	}
	return nil, true
}

func (h *Handler) deleteRule(w http.ResponseWriter, r *http.Request) {
	h.deleteOne(w, r, false)
}

// deleteOne deletes a manual rule or budget at the version given.
func (h *Handler) deleteOne(w http.ResponseWriter, r *http.Request, budget bool) {
	var in struct {
		identity
		Version int64 `json:"version"`
	}
	if !decode(w, r, &in) {
		return
	}
	var errs []fieldError
	key := in.identity.rule("", &errs, budget).Key()
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	what, view := "rule", func(cr configstore.Rule) any { return viewOf(cr.Rule, cr.Version, cr.UpdatedAt) }
	if budget {
		what, view = "budget", func(cr configstore.Rule) any { return budgetViewOf(cr.Rule, cr.Version, cr.UpdatedAt) }
	}
	if _, isConfig := h.config[key]; isConfig {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s comes from the configuration and is read-only here", what, key), nil)
		return
	}
	err := h.cfg.Store.DeleteRule(r.Context(), key, in.Version)
	var conflict *configstore.ConflictError
	switch {
	case errors.As(err, &conflict):
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s is now at version %d", what, key, conflict.Current.Version),
			map[string]any{"current": view(conflict.Current)})
		return
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", what, key), nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info(what+" deleted", "rule", string(key))
	writeJSON(w, http.StatusOK, map[string]any{"deleted": string(key)})
}

func (h *Handler) resetOne(w http.ResponseWriter, r *http.Request) {
	h.resetOneOf(w, r, false)
}

// resetOneOf starts new counters for one rule or budget.
func (h *Handler) resetOneOf(w http.ResponseWriter, r *http.Request, budget bool) {
	var in identity
	if !decode(w, r, &in) {
		return
	}
	var errs []fieldError
	key := in.rule("", &errs, budget).Key()
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	what := map[bool]string{false: "rule", true: "budget"}[budget]
	if _, ok := h.cfg.Limiter.Rules().Lookup(key); !ok {
		if err := h.cfg.Watcher.Load(r.Context()); err != nil {
			h.storeFailed(w, err)
			return
		}
		if _, ok := h.cfg.Limiter.Rules().Lookup(key); !ok {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", what, key), nil)
			return
		}
	}
	if err := h.cfg.Store.Regenerate(r.Context(), []limiter.RuleKey{key}); err != nil {
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info(what+" counters reset", "rule", string(key))
	writeJSON(w, http.StatusOK, map[string]any{"reset": string(key)})
}

func (h *Handler) resetAll(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Confirmation string `json:"confirmation"`
	}
	if !decode(w, r, &in) {
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
