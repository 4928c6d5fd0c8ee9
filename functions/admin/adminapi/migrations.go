package adminapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
)

// migrationView is a migration as GET /admin/migrations shows it: its
// share in percent, where it stands, why it holds and its history.
type migrationView struct {
	Name  string  `json:"name"`
	From  string  `json:"from"`
	To    string  `json:"to"`
	Scope string  `json:"scope"`
	Share float64 `json:"share"`
	// State is pending (no instance started it yet), running, holding,
	// paused, rolled_back or complete (at its maximum).
	State    string  `json:"state"`
	Holding  string  `json:"holding,omitempty"`
	Step     float64 `json:"step"`
	Max      float64 `json:"max"`
	Every    string  `json:"every"`
	Since    *string `json:"interval_started,omitempty"`
	NextStep *string `json:"next_step_at,omitempty"`
	History  []struct {
		At    string  `json:"at"`
		Share float64 `json:"share"`
		Why   string  `json:"why"`
	} `json:"history"`
}

func pct(h int64) float64 { return float64(h) / 100 }

func migrationViewOf(p configstore.MigrationPlan, st configstore.MigrationState) migrationView {
	v := migrationView{Name: p.Name, From: p.From, To: p.To, Scope: p.Scope, Share: pct(p.ShareOf(st)), Step: pct(p.Step),
		Max: pct(p.Max), Every: p.Every.String(), Holding: st.Holding}
	switch {
	case st.V == 0:
		v.State = "pending"
	case st.RolledBack:
		v.State = "rolled_back"
	case st.Paused:
		v.State = "paused"
	case st.Share >= p.Max:
		v.State = "complete"
	case st.Holding != "":
		v.State = "holding"
	default:
		v.State = "running"
	}
	if st.V > 0 {
		since, next := st.At.UTC().Format(time.RFC3339), st.At.Add(p.Every).UTC().Format(time.RFC3339)
		v.Since = &since
		if v.State == "running" || v.State == "holding" {
			v.NextStep = &next
		}
	}
	for _, s := range st.History {
		v.History = append(v.History, struct {
			At    string  `json:"at"`
			Share float64 `json:"share"`
			Why   string  `json:"why"`
		}{s.At.UTC().Format(time.RFC3339), pct(s.Share), s.Why})
	}
	return v
}

// listMigrations serves GET /admin/migrations: each configured migration
// as the store has it now.
func (h *Handler) listMigrations(w http.ResponseWriter, r *http.Request) {
	snap, err := h.cfg.Watcher.Current(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	out := []migrationView{}
	for _, p := range h.cfg.Watcher.MigrationPlans() {
		out = append(out, migrationViewOf(p, snap.Migrations[p.Name]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"migrations": out})
}

// controlMigration serves POST /admin/migrations/{name}/pause, resume and
// rollback.
func (h *Handler) controlMigration(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var plan *configstore.MigrationPlan
		for _, p := range h.cfg.Watcher.MigrationPlans() {
			if p.Name == name {
				plan = &p
			}
		}
		if plan == nil {
			writeError(w, http.StatusNotFound, "not_found", "no migration "+name+" is configured", nil)
			return
		}
		before := h.cfg.Watcher.Migrations()[name]
		why := "by " + principalOf(r).actor()
		st, err := h.cfg.Watcher.ControlMigration(r.Context(), name, action, why, h.cfg.Now())
		switch {
		case errors.Is(err, configstore.ErrMigrationMoved):
			writeError(w, http.StatusConflict, "conflict", "the migration kept moving meanwhile; try again", nil)
			return
		case err != nil:
			h.storeFailed(w, err)
			return
		}
		h.log.Warn("migration "+strings.ReplaceAll(action, "_", " "), "migration", name, "share", pct(st.Share), "actor", principalOf(r).actor())
		view := migrationViewOf(*plan, st)
		h.record(r, "migration:"+name, "", migrationViewOf(*plan, before), view)
		writeJSON(w, http.StatusOK, view)
	}
}
