package adminapi

import (
	"encoding/json"
	"net/http"
	"time"
)

// GET /admin/alerts lists the alerts firing now and those resolved in
// the last week (newest first, at most 100), each as its webhook
// delivered it, and what the configuration watches. It costs one query
// of the alert items, which are one per alert identity that ever fired
// (resolved ones are removed 30 days on). A delegated key sees the
// alerts on the rules and budgets of its subtree.

// recentAlerts bounds the resolved alerts listed, and alertWeek how far
// back they go.
const (
	recentAlerts = 100
	alertWeek    = 7 * 24 * time.Hour
)

func (h *Handler) listAlerts(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Alerts == nil {
		writeError(w, http.StatusNotFound, "not_found", "this store keeps no alerts", nil)
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	kept, err := h.cfg.Alerts.Alerts(ctx)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	p := principalOf(r)
	since := h.cfg.Now().Add(-alertWeek)
	active, recent := []json.RawMessage{}, []json.RawMessage{}
	for _, a := range kept {
		var doc struct {
			Kind    string `json:"kind"`
			Subject string `json:"subject"`
		}
		_ = json.Unmarshal(a.Doc, &doc)
		if !p.master && !((doc.Kind == "use" || doc.Kind == "forecast") && p.seesID(doc.Subject)) {
			continue
		}
		switch {
		case a.Active:
			active = append(active, a.Doc)
		case a.ResolvedAt.After(since) && len(recent) < recentAlerts:
			recent = append(recent, a.Doc)
		}
	}
	out := map[string]any{"active": active, "recent": recent}
	if p.master {
		out["config"] = h.cfg.AlertsConfig
	}
	writeJSON(w, http.StatusOK, out)
}
