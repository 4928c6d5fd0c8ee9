package adminapi

import (
	"net/http"
	"slices"
)

// GET /admin/overview is what the dashboard polls: every rule and budget
// with its live usage, the pauses in force, and the providers with their
// models (for the rules that apply to one). It costs one read of the
// configuration's version when nothing changed (the snapshot when it did)
// and one batch read per hundred counters, whatever the number of rules:
// no read per rule (TestDashboardRefreshCost counts them).

// Provider is a provider instance as the dashboard lists it.
type Provider struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Models it serves; empty: any model id.
	Models []string `json:"models"`
	// Capabilities are what each of Models can do.
	Capabilities []ModelCapabilities `json:"capabilities,omitempty"`
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	snap, usage, ok := h.live(w, r)
	if !ok {
		return
	}
	now := h.cfg.Now()
	who := principalOf(r)
	pauses := []pauseView{}
	for _, p := range snap.Pauses {
		if p.Active(now) && who.seesPause(p) {
			pauses = append(pauses, pauseViewOf(p, now))
		}
	}
	providers := slices.Clone(h.cfg.Providers)
	if providers == nil || !who.master {
		providers = []Provider{} // a delegated key's view is its subtree's
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"version":     snap.Version,
		"rate_limits": h.views(who, rules, snap, usage),
		"budgets":     h.views(who, budgets, snap, usage),
		"pauses":      pauses,
		"providers":   providers,
	})
}
