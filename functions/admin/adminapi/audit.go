package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/limiter"
)

// The audit trail: every admin write that was applied, by the master key
// or a delegated one, is recorded after it applied, with who made it, the
// route, the target, the target before and after, and when. A write that
// was refused (400, 403, 404, 409) changed nothing and is not recorded.
// The entry is written after the change, not in the same transaction:
// if that write fails, the change stands and the failure is logged as an
// error naming the entry (audit_lost), never silently.

// auditTimeout bounds the write of an entry.
const auditTimeout = 5 * time.Second

// record writes the audit entry of an applied write of target.
func (h *Handler) record(r *http.Request, target, userPath string, before, after any) {
	p := principalOf(r)
	now := h.cfg.Now().UTC()
	e := configstore.AuditEntry{
		ID: configstore.NewAuditID(now), At: now, Actor: p.actor(), Action: r.Method + " " + r.URL.Path,
		Target: target, UserPath: userPath, Before: asJSON(before), After: asJSON(after),
	}
	if !p.master {
		e.ActorPath = p.key.UserPath
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	if err := h.cfg.Store.PutAudit(ctx, e, h.cfg.AuditRetention); err != nil {
		h.log.Error("audit_lost: an applied admin write could not be recorded in the audit trail",
			"actor", e.Actor, "action", e.Action, "target", target, "err", err.Error())
	}
}

func asJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	if b, ok := v.(json.RawMessage); ok {
		return b
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return nil
	}
	return b
}

// pathOf is the user path a rule concerns, for the audit trail's subtree
// filter: a user-path rule's subject, else none.
func pathOf(r limiter.Rule) string {
	if r.Scope == limiter.ScopeUserPath {
		return r.Subject
	}
	return ""
}

// auditView is one entry as GET /admin/audit lists it.
type auditView struct {
	ID        string          `json:"id"`
	At        time.Time       `json:"at"`
	Actor     string          `json:"actor"`
	ActorPath string          `json:"actor_user_path,omitempty"`
	Action    string          `json:"action"`
	Target    string          `json:"target"`
	UserPath  string          `json:"user_path,omitempty"`
	Before    json.RawMessage `json:"before"`
	After     json.RawMessage `json:"after"`
	Applied   bool            `json:"applied"`
}

// listAudit is GET /admin/audit?since=&subject=&cursor=&limit=: a page of
// the trail, newest first (at most 100 entries, and a cursor to the
// next). since is RFC 3339 or a duration back from now ("24h"); subject a
// target id or a user path (entries within it). A delegated key sees its
// subtree's entries and its own writes only.
func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request) {
	q := configstore.AuditQuery{Subject: r.URL.Query().Get("subject"), Cursor: r.URL.Query().Get("cursor")}
	var errs []fieldError
	if v := r.URL.Query().Get("since"); v != "" {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			q.Since = t
		} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
			q.Since = h.cfg.Now().Add(-d)
		} else {
			errs = append(errs, fieldError{Field: "since", Message: "an RFC 3339 instant or a duration back from now (24h)"})
		}
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > configstore.MaxAuditPage {
			errs = append(errs, fieldError{Field: "limit", Message: "a number from 1 to " + strconv.Itoa(configstore.MaxAuditPage)})
		}
		q.Limit = n
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if p := principalOf(r); !p.master {
		q.Within = p.key.UserPath
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	page, err := h.cfg.Store.Audit(ctx, q)
	switch {
	case errors.Is(err, configstore.ErrBadCursor):
		invalid(w, []fieldError{{Field: "cursor", Message: err.Error()}})
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	out := make([]auditView, len(page.Entries))
	for i, e := range page.Entries {
		out[i] = auditView{ID: e.ID, At: e.At, Actor: e.Actor, ActorPath: e.ActorPath, Action: e.Action, Target: e.Target,
			UserPath: e.UserPath, Before: orNull(e.Before), After: orNull(e.After), Applied: true}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out, "next_cursor": page.Next})
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
