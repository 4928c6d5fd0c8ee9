package adminapi

import (
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// ModelCapabilities is what is known of a model for compatibility-checked
// fallback, as GET /admin/overview, GET /admin/providers and explain show
// it: yes, no or unknown for each feature (unknown is not assumed).
type ModelCapabilities struct {
	Model            string   `json:"model,omitempty"`
	ContextWindow    int64    `json:"context_window,omitempty"`
	MaxOutputTokens  int64    `json:"max_output_tokens,omitempty"`
	Tools            string   `json:"tools"`
	Vision           string   `json:"vision"`
	Audio            string   `json:"audio"`
	StructuredOutput string   `json:"structured_output"`
	Regions          []string `json:"regions,omitempty"`
	Family           string   `json:"family,omitempty"`
}

// CapabilitiesOf shows c, the capabilities of model.
func CapabilitiesOf(model string, c providers.Capabilities) ModelCapabilities {
	return ModelCapabilities{
		Model: model, ContextWindow: c.ContextWindow, MaxOutputTokens: c.MaxOutputTokens,
		Tools: featureName(c.Tools), Vision: featureName(c.Vision), Audio: featureName(c.Audio),
		StructuredOutput: featureName(c.StructuredOutput), Regions: c.Regions, Family: c.Family,
	}
}

func featureName(f providers.Feature) string {
	switch f {
	case providers.FeatureYes:
		return "yes"
	case providers.FeatureNo:
		return "no"
	}
	return "unknown"
}

// GET /admin/providers lists the providers with what their models can do
// (the built-in table, dated, with the configuration's declarations laid
// over it) and what each upstream last reported of its own limits, for
// the provider as a whole ("*") and for each model it lists: one batch
// read of the reports. The dashboard's provider view shows it.
func (h *Handler) listProviders(w http.ResponseWriter, r *http.Request) {
	if !principalOf(r).master {
		writeError(w, http.StatusForbidden, "forbidden", "the providers are the master key's to see", nil)
		return
	}
	var keys []string
	for _, p := range h.cfg.Providers {
		keys = append(keys, strings.ToLower(p.Name)+"/*")
		for _, m := range p.Models {
			keys = append(keys, strings.ToLower(p.Name+"/"+m))
		}
	}
	var reps map[string]limiter.UpstreamReport
	if h.cfg.Upstream != nil && len(keys) > 0 {
		var err error
		if reps, err = h.cfg.Upstream.UpstreamReports(r.Context(), keys); err != nil {
			h.storeFailed(w, err)
			return
		}
	}
	type view struct {
		Provider
		Reports map[string]*upstreamReport `json:"upstream_reports"`
	}
	out := []view{}
	for _, p := range h.cfg.Providers {
		v := view{Provider: p, Reports: map[string]*upstreamReport{}}
		if rep, ok := reps[strings.ToLower(p.Name)+"/*"]; ok {
			v.Reports["*"] = reportOf(rep)
		}
		for _, m := range p.Models {
			if rep, ok := reps[strings.ToLower(p.Name+"/"+m)]; ok {
				v.Reports[m] = reportOf(rep)
			}
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"capabilities_date": providers.CapabilitiesDate, "providers": out})
}
