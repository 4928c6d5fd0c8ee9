package adminapi

import (
	"net/http"

	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
)

// GET /admin/stats is the data behind the dashboard's charts: refusals by
// rule and the estimate error by route, per minute over the last hour,
// from the store, so every instance answers the same. It costs one
// BatchGetItem per kind, whatever the number of rules.

type statsView struct {
	From    time.Time `json:"from"`
	Minutes []string  `json:"minutes"` // each minute's start, RFC 3339
	// Refusals by rule id: a count per minute.
	Refusals map[string][]float64 `json:"refusals"`
	// EstimateError by route: used over reserved tokens per minute (null
	// for a minute with nothing settled).
	EstimateError map[string][]*float64 `json:"estimate_error"`
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Stats == nil {
		writeError(w, http.StatusNotFound, "not_found", "this store keeps no stats", nil)
		return
	}
	now := h.cfg.Now().UTC().Truncate(time.Minute)
	minutes := make([]time.Time, 60)
	out := statsView{Refusals: map[string][]float64{}, EstimateError: map[string][]*float64{}}
	for i := range minutes {
		minutes[i] = now.Add(time.Duration(i-59) * time.Minute)
		out.Minutes = append(out.Minutes, minutes[i].Format(time.RFC3339))
	}
	out.From = minutes[0]
	refused, err := h.cfg.Stats.MinuteStats(r.Context(), metrics.StatsRefused, minutes)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	estimate, err := h.cfg.Stats.MinuteStats(r.Context(), metrics.StatsEstimate, minutes)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	for i, m := range minutes {
		for rule, n := range refused[m] {
			if out.Refusals[rule] == nil {
				out.Refusals[rule] = make([]float64, len(minutes))
			}
			out.Refusals[rule][i] = n
		}
		for name, reserved := range estimate[m] {
			route, ok := strings.CutPrefix(name, "reserved:")
			if !ok || reserved <= 0 {
				continue
			}
			if out.EstimateError[route] == nil {
				out.EstimateError[route] = make([]*float64, len(minutes))
			}
			ratio := estimate[m]["used:"+route] / reserved
			out.EstimateError[route][i] = &ratio
		}
	}
	writeJSON(w, http.StatusOK, out)
}
