package adminapi

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/limiter"
)

// Rate limits and budgets are managed alike, through the same calls:
//
//	PUT    /admin/<collection>[/{id}]     create or update, as seed 000 documents it: an
//	                                      update of the limits alone keeps the counters;
//	                                      in the collection, "from" moves a rule
//	POST   /admin/<collection>            create (409 if it exists)
//	PATCH  /admin/<collection>/{id}       change only the fields sent
//	GET    /admin/<collection>/{id}       one, with its live usage (ETag: its version)
//	DELETE /admin/<collection>[/{id}]     delete (the collection takes the seed's JSON body)
//	POST   /admin/<collection>/reset-one  new counters for one ({scope, subject, period})
//
// Any write is conditional when it carries a version ("version" in the
// body, or If-Match): a version that is not the current one is 409 with
// the current rule, so no careful writer loses an update. A PUT without
// one is the seed's last writer wins.
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

// crudRoutes registers a kind's routes; a delegated key may call each,
// for the rules of its subtree (see delegate.go).
func (h *Handler) crudRoutes(k *kind) {
	h.handle("GET "+k.collection, true, func(w http.ResponseWriter, r *http.Request) { h.list(w, r, k) })
	h.handle("POST "+k.collection, true, func(w http.ResponseWriter, r *http.Request) { h.create(w, r, k) })
	h.handle("PUT "+k.collection, true, func(w http.ResponseWriter, r *http.Request) { h.replace(w, r, k, false) })
	h.handle("PUT "+k.collection+"/{id...}", true, func(w http.ResponseWriter, r *http.Request) { h.replace(w, r, k, true) })
	h.handle("PATCH "+k.collection+"/{id...}", true, func(w http.ResponseWriter, r *http.Request) { h.patch(w, r, k) })
	h.handle("GET "+k.collection+"/{id...}", true, func(w http.ResponseWriter, r *http.Request) { h.getOne(w, r, k) })
	h.handle("DELETE "+k.collection, true, func(w http.ResponseWriter, r *http.Request) { h.remove(w, r, k, false) })
	h.handle("DELETE "+k.collection+"/{id...}", true, func(w http.ResponseWriter, r *http.Request) { h.remove(w, r, k, true) })
	h.handle("POST "+k.collection+"/reset-one", true, func(w http.ResponseWriter, r *http.Request) { h.resetOne(w, r, k) })
}

// list answers every rule of the kind, the configuration's first, each
// with its live usage.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, k *kind) {
	snap, usage, ok := h.live(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{k.listKey: h.views(principalOf(r), k, snap, usage), "version": snap.Version})
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

// views shows every rule of the kind that p sees, the configuration's
// first.
func (h *Handler) views(p principal, k *kind, snap configstore.Snapshot, usage map[limiter.RuleKey]*limiter.RuleUsage) []any {
	out := []any{}
	for _, cr := range h.cfg.ConfigRules {
		if isBudget(cr) == k.budget && p.sees(cr) {
			out = append(out, k.viewWithUsage(cr, 0, time.Time{}, usage[cr.Key()]))
		}
	}
	for _, m := range snap.Rules {
		if _, shadowed := h.config[m.Key()]; !shadowed && isBudget(m.Rule) == k.budget && p.sees(m.Rule) {
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
	version, verrs := writeVersion(r, in.version())
	errs = withProblems(append(errs, verrs...), rule)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if version != 0 {
		h.save(w, r, k, rule, from, version)
		return
	}
	h.upsert(w, r, k, rule, from)
}

// upsert creates rule, or updates (or, with from, moves) the one there
// is, whatever its version: the seed's PUT. A write that loses a race to
// another is made again on what won, so the last writer wins.
func (h *Handler) upsert(w http.ResponseWriter, r *http.Request, k *kind, rule limiter.Rule, from limiter.RuleKey) {
	if !h.checkWrite(w, r, rule, from) || h.readOnlyAny(w, k, rule.Key(), from) || !h.checkLooser(w, r, rule) {
		return
	}
	at := cmp.Or(from, rule.Key())
	var saved configstore.Rule
	var err error
	var version int64
	var before *configstore.Rule
	for range 4 {
		cur, ok := h.current(w, r, at)
		if !ok {
			return
		}
		before = cur
		switch {
		case cur != nil:
			version = cur.Version
		case from != "":
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", k.what, from), nil)
			return
		default:
			version = 0
		}
		saved, err = h.put(r, rule, from, version)
		var conflict *configstore.ConflictError
		if !errors.As(err, &conflict) {
			break
		}
	}
	h.answerSave(w, r, k, rule, from, version, before, saved, err)
}

// writeVersion is the version a write is conditional on: the body's, or
// If-Match's (a number, quoted or not, as ETag writes it); 0 for none.
func writeVersion(r *http.Request, body int64) (int64, []fieldError) {
	if body < 0 {
		return 0, []fieldError{{Field: "version", Message: "must not be negative"}}
	}
	m := strings.TrimPrefix(strings.TrimSpace(r.Header.Get("If-Match")), "W/")
	if m == "" || m == "*" {
		return body, nil
	}
	v, err := strconv.ParseInt(strings.Trim(m, `"`), 10, 64)
	switch {
	case err != nil || v < 1:
		return 0, []fieldError{{Field: "If-Match", Message: fmt.Sprintf("%q is not a version (the ETag of GET)", m)}}
	case body != 0 && body != v:
		return 0, []fieldError{{Field: "version", Message: fmt.Sprintf("%d, but If-Match says %d", body, v)}}
	}
	return v, nil
}

func (h *Handler) patch(w http.ResponseWriter, r *http.Request, k *kind) {
	base, ok := h.urlRule(w, r, k)
	if !ok {
		return
	}
	key := base.Key()
	if !h.checkWrite(w, r, *base, "") || h.readOnly(w, k, key) {
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
	version, verrs := writeVersion(r, in.version())
	errs = append(errs, verrs...)
	if version == 0 {
		version = cur.Version // conditional on what was read
	}
	identityOnly := *base
	identityOnly.Subject = cur.Subject // the spelling it was created with
	rule := in.build(&identityOnly, &errs)
	if errs = withProblems(errs, rule); len(errs) > 0 {
		invalid(w, errs)
		return
	}
	h.save(w, r, k, rule, key, version)
}

func (h *Handler) getOne(w http.ResponseWriter, r *http.Request, k *kind) {
	base, ok := h.urlRule(w, r, k)
	if !ok {
		return
	}
	key := base.Key()
	if p := principalOf(r); !p.sees(*base) {
		h.forbidden(w, r, p, base.ID()+" is outside its subtree")
		return
	}
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
	if found.Version > 0 {
		w.Header().Set("ETag", etag(found.Version))
	}
	writeJSON(w, http.StatusOK, k.viewWithUsage(found.Rule, found.Version, found.UpdatedAt, u))
}

// save writes a checked rule, moved from the key from if that is set, at
// version (0: create), and answers with what was saved.
func (h *Handler) save(w http.ResponseWriter, r *http.Request, k *kind, rule limiter.Rule, from limiter.RuleKey, version int64) {
	if !h.checkWrite(w, r, rule, from) || h.readOnlyAny(w, k, rule.Key(), from) || !h.checkLooser(w, r, rule) {
		return
	}
	var before *configstore.Rule
	if version != 0 {
		// For the audit trail: the rule as this instance last read it
		// (its version checked, one small read), not a read of its own.
		before = h.known(r, cmp.Or(from, rule.Key()))
	}
	saved, err := h.put(r, rule, from, version)
	h.answerSave(w, r, k, rule, from, version, before, saved, err)
}

// known returns the manual rule at key as the watcher's snapshot has it
// (the store's version read, the snapshot only when it changed); nil
// when there is none or the store cannot say.
func (h *Handler) known(r *http.Request, key limiter.RuleKey) *configstore.Rule {
	snap, err := h.cfg.Watcher.Current(r.Context())
	if err != nil {
		return nil
	}
	for _, m := range snap.Rules {
		if m.Key() == key {
			return &m
		}
	}
	return nil
}

// put writes a checked rule at version (0: create; otherwise an update
// of the rule at from, or at its own key).
func (h *Handler) put(r *http.Request, rule limiter.Rule, from limiter.RuleKey, version int64) (configstore.Rule, error) {
	if from == "" && version != 0 {
		from = rule.Key()
	}
	return h.cfg.Store.PutRule(r.Context(), configstore.Rule{Rule: rule}, from, version)
}

// answerSave answers a write of rule at version: what was saved, or why
// not (409 with the current rule when the version was not the current
// one, or the rule exists already).
func (h *Handler) answerSave(w http.ResponseWriter, r *http.Request, k *kind, rule limiter.Rule, from limiter.RuleKey, version int64, before *configstore.Rule, saved configstore.Rule, err error) {
	key := rule.Key()
	var conflict *configstore.ConflictError
	switch {
	case errors.As(err, &conflict) && version == 0:
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s already exists (version %d): PUT it, or PATCH it, with that version",
			k.what, conflict.Current.ID(), conflict.Current.Version),
			map[string]any{"current": k.view(conflict.Current.Rule, conflict.Current.Version, conflict.Current.UpdatedAt)})
		return
	case errors.As(err, &conflict):
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s is at version %d, not %d: read it and send that version",
			k.what, conflict.Current.ID(), conflict.Current.Version, version),
			map[string]any{"current": k.view(conflict.Current.Rule, conflict.Current.Version, conflict.Current.UpdatedAt)})
		return
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %s does not exist", k.what, cmp.Or(from, key)), nil)
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
	case from != "" && from != key:
		verb = "moved"
	}
	h.log.Info(k.what+" "+verb, "rule", rule.ID(), "version", saved.Version, "actor", principalOf(r).actor())
	var was any
	if before != nil && version != 0 {
		was = k.view(before.Rule, before.Version, before.UpdatedAt)
	}
	after := k.view(saved.Rule, saved.Version, saved.UpdatedAt)
	h.record(r, rule.ID(), pathOf(rule), was, after)
	w.Header().Set("ETag", etag(saved.Version))
	writeJSON(w, status, after)
}

// etag is a rule's version as an ETag, which If-Match takes back.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// readOnlyAny is readOnly for each of the keys that are set.
func (h *Handler) readOnlyAny(w http.ResponseWriter, k *kind, keys ...limiter.RuleKey) bool {
	for _, c := range keys {
		if c != "" && h.readOnly(w, k, c) {
			return true
		}
	}
	return false
}

// readOnly answers 409 for a rule of the configuration.
func (h *Handler) readOnly(w http.ResponseWriter, k *kind, key limiter.RuleKey) bool {
	cr, isConfig := h.config[key]
	if isConfig {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("%s %s comes from the configuration and is read-only here", k.what, cr.ID()), nil)
	}
	return isConfig
}

// current returns the manual rule at key, or nil, answering 503 when the
// store cannot say.
func (h *Handler) current(w http.ResponseWriter, r *http.Request, key limiter.RuleKey) (*configstore.Rule, bool) {
	cur, err := h.lookup(r, key)
	if err != nil {
		h.storeFailed(w, err)
		return nil, false
	}
	return cur, true
}

// lookup returns the manual rule at key, or nil.
func (h *Handler) lookup(r *http.Request, key limiter.RuleKey) (*configstore.Rule, error) {
	snap, err := h.cfg.Store.Snapshot(r.Context())
	if err != nil {
		return nil, err
	}
	for _, m := range snap.Rules {
		if m.Key() == key {
			return &m, nil
		}
	}
	return nil, nil
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
	version, verrs := writeVersion(r, in.Version)
	if errs = append(errs, verrs...); len(errs) > 0 {
		invalid(w, errs)
		return
	}
	key := rule.Key()
	if !h.checkWrite(w, r, rule, "") || h.readOnly(w, k, key) {
		return
	}
	before := h.known(r, key)
	err := h.cfg.Store.DeleteRule(r.Context(), key, version)
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
	h.log.Info(k.what+" deleted", "rule", rule.ID(), "actor", principalOf(r).actor())
	var was any
	if before != nil {
		was = k.view(before.Rule, before.Version, before.UpdatedAt)
	}
	h.record(r, rule.ID(), pathOf(rule), was, nil)
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
	if p := principalOf(r); !p.master {
		// A delegated key resets what it may write, never what binds it.
		if why := h.mayWrite(p, rule, ""); why != "" {
			h.forbidden(w, r, p, why)
			return
		}
	}
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
	h.log.Info(k.what+" counters reset", "rule", live.ID(), "actor", principalOf(r).actor())
	h.record(r, live.ID(), pathOf(live), nil, map[string]any{"reset": live.ID()})
	writeJSON(w, http.StatusOK, map[string]any{"reset": live.ID()})
}
