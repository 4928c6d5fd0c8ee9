package adminapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/limiter"
)

// The emergency brake: POST /admin/pause refuses every request of a scope
// with 503 and the reason, on every instance within the rule-propagation
// bound, until DELETE /admin/pause lifts it or its end passes.

// pauseInput names what to pause, and until when.
type pauseInput struct {
	Scope    string `json:"scope"`
	Subject  string `json:"subject"`
	UserPath string `json:"user_path"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Tag      string `json:"tag"`
	Value    string `json:"value"`
	Key      string `json:"key"`
	// Until (RFC 3339) or For (a duration) ends the pause; neither: until
	// lifted.
	Until  *time.Time `json:"until"`
	For    string     `json:"for"`
	Reason string     `json:"reason"`
}

type pauseView struct {
	ID      string     `json:"id"`
	Scope   string     `json:"scope"`
	Subject string     `json:"subject"`
	Reason  string     `json:"reason,omitempty"`
	Since   time.Time  `json:"since"`
	Until   *time.Time `json:"until,omitempty"`
	Active  bool       `json:"active"`
}

func pauseViewOf(p limiter.Pause, now time.Time) pauseView {
	v := pauseView{ID: p.ID(), Scope: p.Scope.String(), Subject: p.Subject, Reason: p.Reason, Since: p.Since, Active: p.Active(now)}
	if !p.Until.IsZero() {
		u := p.Until
		v.Until = &u
	}
	return v
}

// subject reads which scope and subject the input names.
func (in *pauseInput) subject(errs *[]fieldError) limiter.Pause {
	var p limiter.Pause
	given := 0
	for _, c := range []struct {
		scope limiter.Scope
		v     string
	}{
		{limiter.ScopeUserPath, in.UserPath}, {limiter.ScopeProvider, in.Provider}, {limiter.ScopeModel, in.Model},
		{limiter.ScopeTag, in.Tag}, {limiter.ScopeKey, in.Key},
	} {
		if c.v != "" {
			given++
			p.Scope, p.Subject = c.scope, c.v
		}
	}
	switch {
	case given > 1 || given == 1 && (in.Scope != "" || in.Subject != ""):
		*errs = append(*errs, fieldError{Field: "subject", Message: "give one of user_path, provider, model, tag (with value), key, or scope with subject"})
	case given == 0:
		s, err := limiter.ParseScope(in.Scope)
		if err != nil {
			*errs = append(*errs, fieldError{Field: "scope", Message: "required: user_path, provider, model, tag or key (or one of those fields)"})
		}
		p.Scope, p.Subject = s, in.Subject
	}
	if p.Scope == limiter.ScopeTag && in.Value != "" && in.Tag != "" {
		p.Subject = in.Tag + "=" + in.Value
	} else if in.Value != "" && in.Tag == "" {
		*errs = append(*errs, fieldError{Field: "value", Message: "value goes with tag"})
	}
	return p
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	var in pauseInput
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return
	}
	now := h.cfg.Now()
	p := in.subject(&errs)
	p.Reason, p.Since = strings.TrimSpace(in.Reason), now.UTC()
	switch {
	case in.Until != nil && in.For != "":
		errs = append(errs, fieldError{Field: "until", Message: "give until or for, not both"})
	case in.Until != nil:
		if !in.Until.After(now) {
			errs = append(errs, fieldError{Field: "until", Message: "is not in the future"})
		}
		p.Until = in.Until.UTC()
	case in.For != "":
		d, err := time.ParseDuration(in.For)
		if err != nil || d <= 0 {
			errs = append(errs, fieldError{Field: "for", Message: "not a positive duration (\"15m\", \"2h\")"})
		}
		p.Until = now.Add(d).UTC()
	}
	for _, e := range p.Problems() {
		field, msg, _ := strings.Cut(e.Error(), ": ")
		errs = append(errs, fieldError{Field: field, Message: msg})
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if who := principalOf(r); !who.master && !(p.Scope == limiter.ScopeUserPath && who.within(p.Subject)) {
		h.forbidden(w, r, who, "it pauses user paths within its subtree only")
		return
	}
	if err := h.cfg.Store.PutPause(r.Context(), p); err != nil {
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Warn("paused", "pause", p.ID(), "reason", p.Reason, "until", p.Until, "actor", principalOf(r).actor())
	view := pauseViewOf(p, now)
	h.record(r, p.ID(), pausePath(p), nil, view)
	writeJSON(w, http.StatusCreated, view)
}

func (h *Handler) unpause(w http.ResponseWriter, r *http.Request) {
	var in pauseInput
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return
	}
	p := in.subject(&errs)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if who := principalOf(r); !who.master && !(p.Scope == limiter.ScopeUserPath && who.beneath(p.Subject)) {
		h.forbidden(w, r, who, "it lifts pauses beneath its path only")
		return
	}
	err := h.cfg.Store.DeletePause(r.Context(), p.Key())
	switch {
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", p.ID()+" is not paused", nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.reload(r)
	h.log.Warn("pause lifted", "pause", p.ID(), "actor", principalOf(r).actor())
	h.record(r, p.ID(), pausePath(p), map[string]any{"paused": p.ID()}, nil)
	writeJSON(w, http.StatusOK, map[string]any{"lifted": p.ID()})
}

func (h *Handler) listPauses(w http.ResponseWriter, r *http.Request) {
	snap, err := h.cfg.Store.Snapshot(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	now := h.cfg.Now()
	who := principalOf(r)
	out := []pauseView{}
	for _, p := range snap.Pauses {
		if who.seesPause(p) {
			out = append(out, pauseViewOf(p, now))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"pauses": out})
}

// pausePath is the user path a pause concerns, for the audit trail.
func pausePath(p limiter.Pause) string {
	if p.Scope == limiter.ScopeUserPath {
		return p.Subject
	}
	return ""
}

// seesPause reports whether a pause is in the principal's view.
func (p principal) seesPause(ps limiter.Pause) bool {
	return p.master || ps.Scope == limiter.ScopeUserPath && p.within(ps.Subject)
}
