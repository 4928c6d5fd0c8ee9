package adminapi

import (
	"encoding/csv"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
)

// GET /admin/report?from=&to=[&format=csv] is the periodic review seed 001
// asks for ("review estimation errors and stranded quota weekly"): per
// rule and dimension its peak use (the highest an alert evaluation saw),
// its refusals, what it reserved and what was used of that (tokens, or
// micro-dollars for a budget), the stranded quota (reserved but never
// used: held until the reconciler settled it, or to the window's end when
// the usage was not reported exactly) and the estimate error (used over
// reserved); per provider its admissions and its 429s after admission.
// from and to are RFC 3339 instants (or to a duration back from now,
// from: "168h"), counted in whole UTC hours; default the last 7 days, at
// most 31. It reads two items per hour of the range (720 hours: 15
// BatchGetItems on DynamoDB).

// ReportColumns are the CSV report's columns, in order: kind is "rule" or
// "provider"; a rule's row fills subject (its id) to estimate_error, a
// provider's subject, admitted, upstream_429 and upstream_429_rate.
var ReportColumns = []string{"kind", "subject", "dimension", "peak_use", "refusals", "reserved", "used", "stranded", "estimate_error",
	"admitted", "upstream_429", "upstream_429_rate"}

// maxReportRange bounds a report.
const maxReportRange = 31 * 24 * time.Hour

type reportRule struct {
	Rule          string   `json:"rule"`
	Dimension     string   `json:"dimension,omitempty"`
	PeakUse       *float64 `json:"peak_use"`
	Refusals      float64  `json:"refusals"`
	Reserved      float64  `json:"reserved"`
	Used          float64  `json:"used"`
	Stranded      float64  `json:"stranded"`
	EstimateError *float64 `json:"estimate_error"`
}

type reportProvider struct {
	Provider        string   `json:"provider"`
	Admitted        float64  `json:"admitted"`
	Upstream429     float64  `json:"upstream_429"`
	Upstream429Rate *float64 `json:"upstream_429_rate"`
}

func (h *Handler) report(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Stats == nil {
		writeError(w, http.StatusNotFound, "not_found", "this store keeps no stats", nil)
		return
	}
	now := h.cfg.Now().UTC()
	q := r.URL.Query()
	to, from := now, now.Add(-7*24*time.Hour)
	var errs []fieldError
	instant := func(field, v string, dflt time.Time) time.Time {
		if v == "" {
			return dflt
		}
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return t.UTC()
		}
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return now.Add(-d)
		}
		errs = append(errs, fieldError{Field: field, Message: "an RFC 3339 instant, or a duration back from now (168h)"})
		return dflt
	}
	to = instant("to", q.Get("to"), to)
	from = instant("from", q.Get("from"), to.Add(-7*24*time.Hour))
	format := q.Get("format")
	switch {
	case !from.Before(to):
		errs = append(errs, fieldError{Field: "from", Message: "must be before to"})
	case to.Sub(from) > maxReportRange:
		errs = append(errs, fieldError{Field: "from", Message: "a report covers at most 31 days (744 h)"})
	}
	if format != "" && format != "json" && format != "csv" {
		errs = append(errs, fieldError{Field: "format", Message: "json or csv"})
	}
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	var keys []metrics.StatsKey
	for hr := from.Truncate(time.Hour); hr.Before(to); hr = hr.Add(time.Hour) {
		keys = append(keys, metrics.StatsKey{Kind: metrics.StatsHour, At: hr}, metrics.StatsKey{Kind: metrics.StatsPeak, At: hr})
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	got, err := h.cfg.Stats.ReadStats(ctx, keys)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	p := principalOf(r)
	rules, providers := h.reportOf(p, keys, got)
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="tollgate-report.csv"`)
		cw := csv.NewWriter(w)
		_ = cw.Write(ReportColumns)
		num := func(v *float64) string {
			if v == nil {
				return ""
			}
			return strconv.FormatFloat(*v, 'f', -1, 64)
		}
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
		for _, rr := range rules {
			_ = cw.Write([]string{"rule", rr.Rule, rr.Dimension, num(rr.PeakUse), f(rr.Refusals), f(rr.Reserved), f(rr.Used), f(rr.Stranded), num(rr.EstimateError), "", "", ""})
		}
		for _, pr := range providers {
			_ = cw.Write([]string{"provider", pr.Provider, "", "", "", "", "", "", "", f(pr.Admitted), f(pr.Upstream429), num(pr.Upstream429Rate)})
		}
		cw.Flush()
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"from": from.Truncate(time.Hour), "to": to, "hours": len(keys) / 2, "rules": rules, "providers": providers, "columns": ReportColumns,
	})
}

// reportOf adds up the hours read into rows: every rule in force (and
// every one the hours name), by dimension; every provider named.
func (h *Handler) reportOf(p principal, keys []metrics.StatsKey, got map[metrics.StatsKey]map[string]float64) ([]reportRule, []reportProvider) {
	type dimKey struct{ rule, dim string }
	sums := map[string]float64{}
	peak := map[string]float64{}
	dims := map[dimKey]bool{}
	ruleSet := map[string]bool{}
	provSet := map[string]bool{}
	for _, k := range keys {
		for name, v := range got[k] {
			if k.Kind == metrics.StatsPeak {
				peak[name] = max(peak[name], v)
				ruleSet[name] = true
				continue
			}
			sums[name] += v
			what, rest, _ := strings.Cut(name, ":")
			switch what {
			case "refused":
				ruleSet[rest] = true
			case "reserved", "used", "stranded":
				rule, dim, _ := strings.Cut(rest, "|")
				ruleSet[rule] = true
				dims[dimKey{rule, dim}] = true
			case "admitted", "upstream429":
				provSet[rest] = true
			}
		}
	}
	for _, r := range h.cfg.Limiter.Rules().List() {
		if !r.PerChild {
			ruleSet[r.ID()] = true
		}
	}
	var rules []reportRule
	for _, id := range slices.Sorted(maps.Keys(ruleSet)) {
		if !p.seesID(id) {
			continue
		}
		var ds []string
		for k := range dims {
			if k.rule == id {
				ds = append(ds, k.dim)
			}
		}
		slices.Sort(ds)
		if len(ds) == 0 {
			ds = []string{""}
		}
		for _, d := range ds {
			row := reportRule{Rule: id, Dimension: d, Refusals: sums["refused:"+id]}
			if v, ok := peak[id]; ok {
				row.PeakUse = &v
			}
			if d != "" {
				n := id + "|" + d
				row.Reserved, row.Used, row.Stranded = sums["reserved:"+n], sums["used:"+n], sums["stranded:"+n]
				if row.Reserved > 0 {
					e := row.Used / row.Reserved
					row.EstimateError = &e
				}
			}
			rules = append(rules, row)
		}
	}
	providers := []reportProvider{}
	if p.master {
		for _, name := range slices.Sorted(maps.Keys(provSet)) {
			row := reportProvider{Provider: name, Admitted: sums["admitted:"+name], Upstream429: sums["upstream429:"+name]}
			if row.Admitted > 0 {
				rate := row.Upstream429 / row.Admitted
				row.Upstream429Rate = &rate
			}
			providers = append(providers, row)
		}
	}
	if rules == nil {
		rules = []reportRule{}
	}
	return rules, providers
}
