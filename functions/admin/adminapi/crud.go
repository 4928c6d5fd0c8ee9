package adminapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/limiter"
)

// Rate limits and budgets are managed alike, through the same calls:
//
//	POST   /admin/<collection>            create (409 if it exists)
//	PUT    /admin/<collection>[/{id}]     replace: "version" required (428 without), 409 if stale;
//	                                      in the collection, "from" moves a rule
//	PATCH  /admin/<collection>/{id}       change only the fields sent
//	GET    /admin/<collection>/{id}       one, with its live usage
//	DELETE /admin/<collection>[/{id}]     delete ("version" optional)
//	POST   /admin/<collection>/reset-one  new counters for one ({"id": …})
//
// {id} is the rule's canonical id (limiter.Rule.ID), as headers, logs and
// /v1/usage name it; the collection's calls may name a rule by its fields
// instead.

// input is a rule or budget body.
type input interface {
	// build returns the rule the body describes, appending its problems:
	// base, when set, is the rule the URL names.
	build(base *limiter.Rule, errs *[]fieldError) limiter.Rule
	version() int64
	setVersion(int64)
	from() *identity
	names() *identity
}

// kind is what rate limits and budgets differ in.
type kind struct {
	what       string // "rule" or "budget"
	budget     bool
	collection string
	listKey    string // the list's member in GET <collection>
	newInput   func() input
	// inputOf is a rule's own fields as a body, which a PATCH overlays.
	inputOf       func(limiter.Rule) input
	view          func(limiter.Rule, int64, time.Time) any
	viewWithUsage func(limiter.Rule, int64, time.Time, *limiter.RuleUsage) any
}

func (h *Handler) crudRoutes(k *kind) {
	h.mux.HandleFunc("GET "+k.collection, func(w http.ResponseWriter, r *http.Request) { h.list(w, r, k) })
	h.mux.HandleFunc("POST "+k.collection, func(w http.ResponseWriter, r *http.Request) { h.create(w, r, k) })
	h.mux.HandleFunc("PUT "+k.collection, func(w http.ResponseWriter, r *http.Request) { h.replace(w, r, k, false) })
	h.mux.HandleFunc("PUT "+k.collection+"/{id...}", func(w http.ResponseWriter, r *http.Request) { h.replace(w, r, k, true) })
	h.mux.HandleFunc("PATCH "+k.collection+"/{id...}", func(w http.ResponseWriter, r *http.Request) { h.patch(w, r, k) })
	h.mux.HandleFunc("GET "+k.collection+"/{id...}", func(w http.ResponseWriter, r *http.Request) { h.getOne(w, r, k) })
	h.mux.HandleFunc("DELETE "+k.collection, func(w http.ResponseWriter, r *http.Request) { h.remove(w, r, k, false) })
	h.mux.HandleFunc("DELETE "+k.collection+"/{id...}", func(w http.ResponseWriter, r *http.Request) { h.remove(w, r, k, true) })
	h.mux.HandleFunc("POST "+k.collection+"/reset-one", func(w http.ResponseWriter, r *http.Request) { h.resetOne(w, r, k) })
}

// list answers every rule of the kind, the configuration's first, each
// with its live usage.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, k *kind) {
	snap, usage, ok := h.live(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{k.listKey: h.views(k, snap, usage), "version": snap.Version})
}

// live reads the configuration as it is now (one read of its version when
// it has not changed) and the live usage of every rule in force (one batch
// read per hundred counters).
func (h *Handler) live(w http.ResponseWriter, r *http.Request) (configstore.Snapshot, map[limiter.RuleKey]*limiter.RuleUsage, bool) {
	ctx := r.Context()
	snap, err := h.cfg.Watcher.Current(ctx)
	if err != nil {
		h.storeFailed(w, err)
		return snap, nil, false
	}
	live, err := h.cfg.Limiter.AllUsage(ctx, h.cfg.Now())
	if err != nil {
		h.storeFailed(w, err)
		return snap, nil, false
	}
	usage := map[limiter.RuleKey]*limiter.RuleUsage{}
	for i := range live {
		usage[live[i].Rule.Key()] = &live[i]
	}
	return snap, usage, true
}

// views shows every rule of the kind, the configuration's first.
func (h *Handler) views(k *kind, snap configstore.Snapshot, usage map[limiter.RuleKey]*limiter.RuleUsage) []any {
	out := []any{}
	for _, cr := range h.cfg.ConfigRules {
		if cr.IsBudget() == k.budget {
			out = append(out, k.viewWithUsage(cr, 0, time.Time{}, usage[cr.Key()]))
		}
	}
	for _, m := range snap.Rules {
		if _, shadowed := h.config[m.Key()]; !shadowed && m.IsBudget() == k.budget {
			out = append(out, k.viewWithUsage(m.Rule, m.Version, m.UpdatedAt, usage[m.Key()]))
		}
	}
	return out
}

// urlRule returns the identity the URL's {id} names, answering 404 when it
// names none.
func (h *Handler) urlRule(w http.ResponseWriter, r *http.Request, k *kind) (*limiter.Rule, bool) {
	rule, err := byID(r.PathValue("id"), k.budget)
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", err.Error(), nil)
		return nil, false
	}
	return &rule, true
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, k *kind) {
	in := k.newInput()
	var errs []fieldError
	if _, ok := decode(w, r, in, &errs); !ok {
		return
	}
	rule := in.build(nil, &errs)
	if in.version() != 0 {
		errs = append(errs, fieldError{Field: "version", Message: "a new " + k.what + " has none; to replace one, PUT it with the version you read"})
	}
	if in.from() != nil {
		errs = append(errs, fieldError{Field: "from", Message: "moving a " + k.what + " is a PUT"})
	}
	if errs = withProblems(errs, rule); len(errs) > 0 {
		invalid(w, errs)
		return
	}
	h.save(w, r, k, rule, "", 0)
}

func (h *Handler) replace(w http.ResponseWriter, r *http.Request, k *kind, byURL bool) {
	var base *limiter.Rule
	if byURL {
		var ok bool
		if base, ok = h.urlRule(w, r, k); !ok {
			return
		}
	}
	in := k.newInput()
	var errs []fieldError
	if _, ok := decode(w, r, in, &errs); !ok {
		return
	}
	rule := in.build(base, &errs)
	var from limiter.RuleKey
	if f := in.from(); f != nil {
		from = f.rule("from.", &errs, k.budget).Key()
	}
	if in.version() < 0 {
		errs = append(errs, fieldError{Field: "version", Message: "must not be negative"})
	}
	errs = withProblems(errs, rule)
	if in.version() == 0 {
		extra := map[string]any{}
		if len(errs) > 0 {
			extra["fields"] = errs
		}
		writeError(w, http.StatusPreconditionRequired, "precondition_required",
			fmt.Sprintf("PUT replaces a %s: send the version you read (GET %s/%s), POST %s to create one, or PATCH to change only some fields",
				k.what, k.collection, rule.ID(), k.collection), extra)
		return
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	h.save(w, r, k, rule, from, in.version())
}

func (h *Handler) patch(w http.ResponseWriter, r *http.Request, k *kind) {
	base, ok := h.urlRule(w, r, k)
	if !ok {
		return
	}
	key := base.Key()
	if h.readOnly(w, k, key) {
		return
	}
	cur, ok := h.current(w, r, key)
	if !ok {
		return
	}
	if cur == nil {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", k.what, base.ID()), nil)
		return
	}
	in := k.inputOf(cur.Rule)
	var errs []fieldError
	if _, ok := decode(w, r, in, &errs); !ok {
		return
	}
	if in.names().given() || in.from() != nil {
		errs = append(errs, fieldError{Field: "id", Message: "PATCH changes a " + k.what + "'s limits; to move it, PUT to " + k.collection + ` with "from"`})
		*in.names() = identity{}
	}
	if in.version() == 0 {
		in.setVersion(cur.Version) // conditional on what was read
	}
	identityOnly := *base
	identityOnly.Subject = cur.Subject // the spelling it was created with
	rule := in.build(&identityOnly, &errs)
	if errs = withProblems(errs, rule); len(errs) > 0 {
		invalid(w, errs)
		return
	}
	h.save(w, r, k, rule, key, in.version())
}

func (h *Handler) getOne(w http.ResponseWriter, r *http.Request, k *kind) {
	base, ok := h.urlRule(w, r, k)
	if !ok {
		return
	}
	key := base.Key()
	var found *configstore.Rule
	if cr, isConfig := h.config[key]; isConfig {
		found = &configstore.Rule{Rule: cr}
	} else if found, ok = h.current(w, r, key); !ok {
		return
	}
	if found == nil {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", k.what, base.ID()), nil)
		return
	}
	if err := h.cfg.Watcher.Load(r.Context()); err != nil {
		h.storeFailed(w, err)
		return
	}
	u, err := h.cfg.Limiter.RuleUsage(r.Context(), h.cfg.Now(), key)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, k.viewWithUsage(found.Rule, found.Version, found.UpdatedAt, u))
}

// save writes a checked rule, moved from the key from if that is set, at
// version (0: create), and answers with what was saved.
func (h *Handler) save(w http.ResponseWriter, r *http.Request, k *kind, rule limiter.Rule, from limiter.RuleKey, version int64) {
	key := rule.Key()
	for _, c := range []limiter.RuleKey{key, from} {
		if c != "" && h.readOnly(w, k, c) {
			return
		}
	}
	if from == "" && version != 0 {
		from = key
	}
	saved, err := h.cfg.Store.PutRule(r.Context(), configstore.Rule{Rule: rule}, from, version)
	var conflict *configstore.ConflictError
	switch {
	case errors.As(err, &conflict) && version == 0:
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s already exists (version %d): PUT %s/%s with that version to replace it, or PATCH it",
			k.what, conflict.Current.ID(), conflict.Current.Version, k.collection, conflict.Current.ID()),
			map[string]any{"current": k.view(conflict.Current.Rule, conflict.Current.Version, conflict.Current.UpdatedAt)})
		return
	case errors.As(err, &conflict):
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s changed meanwhile (now version %d); read it and send that version",
			k.what, conflict.Current.ID(), conflict.Current.Version),
			map[string]any{"current": k.view(conflict.Current.Rule, conflict.Current.Version, conflict.Current.UpdatedAt)})
		return
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", k.what, from), nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	status, verb := http.StatusOK, "updated"
	switch {
	case version == 0:
		status, verb = http.StatusCreated, "created"
	case from != key:
		verb = "moved"
	}
	h.log.Info(k.what+" "+verb, "rule", rule.ID(), "version", saved.Version)
	writeJSON(w, status, k.view(saved.Rule, saved.Version, saved.UpdatedAt))
}

// readOnly answers 409 for a rule of the configuration.
func (h *Handler) readOnly(w http.ResponseWriter, k *kind, key limiter.RuleKey) bool {
	cr, isConfig := h.config[key]
	if isConfig {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s comes from the configuration and is read-only here", k.what, cr.ID()), nil)
	}
	return isConfig
}

// current returns the manual rule at key, or nil.
func (h *Handler) current(w http.ResponseWriter, r *http.Request, key limiter.RuleKey) (*configstore.Rule, bool) {
	snap, err := h.cfg.Store.Snapshot(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return nil, false
	}
	for _, m := range snap.Rules {
		if m.Key() == key {
			return &m, true
		}
	}
	return nil, true
}

func (h *Handler) remove(w http.ResponseWriter, r *http.Request, k *kind, byURL bool) {
	var in struct {
		identity
		Version int64 `json:"version"`
	}
	var errs []fieldError
	var rule limiter.Rule
	if byURL {
		base, ok := h.urlRule(w, r, k)
		if !ok {
			return
		}
		rule = *base
		if r.ContentLength != 0 && r.Body != http.NoBody {
			if _, ok := decode(w, r, &in, &errs); !ok {
				return
			}
			if in.given() {
				errs = append(errs, fieldError{Field: "id", Message: "the URL names the " + k.what})
			}
		}
	} else {
		if _, ok := decode(w, r, &in, &errs); !ok {
			return
		}
		rule = in.rule("", &errs, k.budget)
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	key := rule.Key()
	if h.readOnly(w, k, key) {
		return
	}
	err := h.cfg.Store.DeleteRule(r.Context(), key, in.Version)
	var conflict *configstore.ConflictError
	switch {
	case errors.As(err, &conflict):
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s is now at version %d", k.what, conflict.Current.ID(), conflict.Current.Version),
			map[string]any{"current": k.view(conflict.Current.Rule, conflict.Current.Version, conflict.Current.UpdatedAt)})
		return
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", k.what, rule.ID()), nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info(k.what+" deleted", "rule", rule.ID())
	writeJSON(w, http.StatusOK, map[string]any{"deleted": rule.ID()})
}

// resetOne starts new counters for one rule or budget.
func (h *Handler) resetOne(w http.ResponseWriter, r *http.Request, k *kind) {
	var in identity
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return
	}
	rule := in.rule("", &errs, k.budget)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	key := rule.Key()
	live, ok := h.cfg.Limiter.Rules().Lookup(key)
	if !ok {
		if err := h.cfg.Watcher.Load(r.Context()); err != nil {
			h.storeFailed(w, err)
			return
		}
		if live, ok = h.cfg.Limiter.Rules().Lookup(key); !ok {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", k.what, rule.ID()), nil)
			return
		}
	}
	if err := h.cfg.Store.Regenerate(r.Context(), []limiter.RuleKey{key}); err != nil {
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Info(k.what+" counters reset", "rule", live.ID())
	writeJSON(w, http.StatusOK, map[string]any{"reset": live.ID()})
}
