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

// limitKey names a period: {"period": "minute"} or {"period_seconds": 300}.
type limitKey struct {
	Period        string `json:"period,omitempty"`
	PeriodSeconds int64  `json:"period_seconds,omitempty"`
}

// identity names a rule: scope and subject (or the user_path shorthand)
// and its period.
type identity struct {
	Scope    string    `json:"scope,omitempty"`
	Subject  string    `json:"subject,omitempty"`
	UserPath string    `json:"user_path,omitempty"`
	LimitKey *limitKey `json:"limit_key,omitempty"`
	// Period is reset-one's form of limit_key: a name or a number of
	// seconds.
	Period any `json:"period,omitempty"`
}

// ruleInput is a PUT body.
type ruleInput struct {
	identity
	MaxRequests     *int64    `json:"max_requests"`
	MaxTokens       *int64    `json:"max_tokens"`
	MaxInputTokens  *int64    `json:"max_input_tokens"`
	MaxOutputTokens *int64    `json:"max_output_tokens"`
	PerChild        bool      `json:"per_child"`
	Shards          int       `json:"shards"`
	Version         int64     `json:"version"`
	From            *identity `json:"from"`
}

// resolve turns an identity into scope, subject and period, appending what
// is wrong to errs.
func (id identity) resolve(prefix string, errs *[]fieldError) (limiter.Scope, string, time.Duration) {
	bad := func(f, m string) { *errs = append(*errs, fieldError{Field: prefix + f, Message: m}) }
	var scope limiter.Scope
	subject := id.Subject
	switch {
	case id.UserPath != "" && (id.Scope != "" && id.Scope != "user_path" || id.Subject != ""):
		bad("user_path", "user_path is shorthand for scope user_path with that subject; do not also give scope or subject")
	case id.UserPath != "":
		scope, subject = limiter.ScopeUserPath, id.UserPath
	case id.Scope == "":
		bad("scope", "required (user_path, provider or model), or give user_path")
	default:
		s, err := limiter.ParseScope(id.Scope)
		if err != nil {
			bad("scope", err.Error())
		}
		scope = s
		if subject == "" {
			bad("subject", "required")
		}
	}
	var period time.Duration
	lk := id.LimitKey
	if lk == nil && id.Period != nil {
		switch p := id.Period.(type) {
		case string:
			lk = &limitKey{Period: p}
		case float64:
			lk = &limitKey{PeriodSeconds: int64(p)}
		default:
			bad("period", "a name (minute, hour, day, concurrent) or a number of seconds")
			return scope, subject, 0
		}
	}
	switch {
	case lk == nil:
		bad("limit_key", "required: {\"period\": \"minute\"} or {\"period_seconds\": 300}")
	case lk.Period != "" && lk.PeriodSeconds != 0:
		bad("limit_key", "give period or period_seconds, not both")
	case lk.Period != "":
		p, err := limiter.ParsePeriod(lk.Period)
		if err != nil {
			bad("limit_key.period", err.Error())
		}
		period = p
	case lk.PeriodSeconds > 0:
		period = time.Duration(lk.PeriodSeconds) * time.Second
	default:
		bad("limit_key.period_seconds", "must be at least 1")
	}
	return scope, subject, period
}

func limitKeyOf(p time.Duration) limitKey {
	switch p {
	case limiter.Concurrent, limiter.Minute, limiter.Hour, limiter.Day:
		return limitKey{Period: limiter.PeriodName(p)}
	}
	return limitKey{PeriodSeconds: int64(p / time.Second)}
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
		Key: string(r.Key()), Scope: r.Scope.String(), Subject: r.Subject, LimitKey: limitKeyOf(r.Period),
		MaxRequests: r.MaxRequests, MaxTokens: r.MaxTokens, MaxInputTokens: r.MaxInputTokens, MaxOutputTokens: r.MaxOutputTokens,
		PerChild: r.PerChild, Shards: r.Shards, Source: r.Source.String(), Version: version,
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
}

// UsageOf renders a rule's live state.
func UsageOf(u limiter.RuleUsage) *UsageView {
	v := &UsageView{}
	if !u.WindowStart.IsZero() {
		s, e := u.WindowStart.UTC(), u.WindowEnd.UTC()
		v.WindowStart, v.WindowEnd = &s, &e
	}
	for _, d := range u.Dimensions {
		dv := &DimensionView{Limit: d.Limit, Used: d.Used, Previous: d.Previous, Remaining: d.Remaining}
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
	var out []ruleView
	for _, cr := range h.cfg.ConfigRules {
		out = append(out, viewOf(cr, 0, time.Time{}))
	}
	for _, m := range snap.Rules {
		if _, shadowed := h.config[m.Key()]; !shadowed {
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
	scope, subject, period := in.identity.resolve("", &errs)
	if in.Period != nil {
		errs = append(errs, fieldError{Field: "period", Message: "use limit_key"})
	}
	rule := limiter.Rule{
		Scope: scope, Subject: subject, Period: period, PerChild: in.PerChild, Shards: in.Shards, Source: limiter.SourceManual,
		MaxRequests: deref(in.MaxRequests), MaxTokens: deref(in.MaxTokens),
		MaxInputTokens: deref(in.MaxInputTokens), MaxOutputTokens: deref(in.MaxOutputTokens),
	}
	if in.MaxRequests == nil && in.MaxTokens == nil && in.MaxInputTokens == nil && in.MaxOutputTokens == nil {
		errs = append(errs, fieldError{Field: "max_requests", Message: "give at least one of max_requests, max_tokens, max_input_tokens, max_output_tokens"})
	}
	if in.Version < 0 {
		errs = append(errs, fieldError{Field: "version", Message: "must not be negative"})
	}
	from := limiter.RuleKey("")
	if in.From != nil {
		fs, fsub, fp := in.From.resolve("from.", &errs)
		from = limiter.MakeRuleKey(fs, fsub, fp)
	}
	if len(errs) == 0 {
		for _, e := range rule.Problems() {
			field, msg, ok := strings.Cut(e.Error(), ": ")
			if !ok {
				field, msg = "rule", e.Error()
			}
			errs = append(errs, fieldError{Field: field, Message: msg})
		}
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	key := rule.Key()
	for _, k := range []limiter.RuleKey{key, from} {
		if _, isConfig := h.config[k]; isConfig && k != "" {
			writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("rule %s comes from the configuration and is read-only here", k), nil)
			return
		}
	}
	ctx := r.Context()
	version := in.Version
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
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("rule %s changed meanwhile (now version %d); read it and send that version", conflict.Current.Key(), conflict.Current.Version),
			map[string]any{"current": viewOf(conflict.Current.Rule, conflict.Current.Version, conflict.Current.UpdatedAt)})
		return
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("rule %s does not exist", from), nil)
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
	h.log.Info("rule "+verb, "rule", string(key), "from", string(from), "version", saved.Version)
	writeJSON(w, status, viewOf(saved.Rule, saved.Version, saved.UpdatedAt))
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
	var in struct {
		identity
		Version int64 `json:"version"`
	}
	if !decode(w, r, &in) {
		return
	}
	var errs []fieldError
	scope, subject, period := in.identity.resolve("", &errs)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	key := limiter.MakeRuleKey(scope, subject, period)
	if _, isConfig := h.config[key]; isConfig {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("rule %s comes from the configuration and is read-only here", key), nil)
		return
	}
	err := h.cfg.Store.DeleteRule(r.Context(), key, in.Version)
	var conflict *configstore.ConflictError
	switch {
	case errors.As(err, &conflict):
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("rule %s is now at version %d", key, conflict.Current.Version),
			map[string]any{"current": viewOf(conflict.Current.Rule, conflict.Current.Version, conflict.Current.UpdatedAt)})
		return
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("rule %s does not exist", key), nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info("rule deleted", "rule", string(key))
	writeJSON(w, http.StatusOK, map[string]any{"deleted": string(key)})
}

func (h *Handler) resetOne(w http.ResponseWriter, r *http.Request) {
	var in identity
	if !decode(w, r, &in) {
		return
	}
	var errs []fieldError
	scope, subject, period := in.resolve("", &errs)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	key := limiter.MakeRuleKey(scope, subject, period)
	if _, ok := h.cfg.Limiter.Rules().Lookup(key); !ok {
		if err := h.cfg.Watcher.Load(r.Context()); err != nil {
			h.storeFailed(w, err)
			return
		}
		if _, ok := h.cfg.Limiter.Rules().Lookup(key); !ok {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("rule %s does not exist", key), nil)
			return
		}
	}
	if err := h.cfg.Store.Regenerate(r.Context(), []limiter.RuleKey{key}); err != nil {
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info("rule counters reset", "rule", string(key))
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
