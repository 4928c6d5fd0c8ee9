package adminapi

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
)

// GET /admin/stats is the data behind the dashboard's charts and its
// answers to seed 001's questions, per minute over the last hour, from
// the store, so every instance answers the same. It costs one read of
// 180 stats items (the refusals, estimates and operational counts of 60
// minutes: two BatchGetItems on DynamoDB), whatever the number of rules,
// user paths, models or providers: each item's names are bounded when
// written (metrics.Stats), so its size is too. TestDashboardRefreshCost
// counts it.

// StatsCost is what one GET /admin/stats reads, as it says in its answer.
const StatsCost = "180 stats items in 2 BatchGetItems (refusals, estimates, operations × 60 minutes), whatever the number of rules, paths or models"

type statsView struct {
	From    time.Time `json:"from"`
	Minutes []string  `json:"minutes"` // each minute's start, RFC 3339
	// Refusals by rule id: a count per minute.
	Refusals map[string][]float64 `json:"refusals"`
	// EstimateError by route: used over reserved tokens per minute (null
	// for a minute with nothing settled).
	EstimateError map[string][]*float64 `json:"estimate_error"`
	// TopUserPaths are the user paths that used most over the hour: by
	// requests, input_tokens and output_tokens, at most topN each.
	TopUserPaths map[string][]named `json:"top_user_paths"`
	// Outcomes counts, over the hour, each outcome by class and by model:
	// refused, waited, upstream_429; fallback and downgraded once the
	// gateway counts them (listed, empty, until then).
	Outcomes map[string]map[string][]named `json:"outcomes"`
	// Bottlenecks are, per provider, the rule that refused its requests
	// most over the hour (provider and model rules, and the provider's own
	// 429s after admission), with every rule's count.
	Bottlenecks []bottleneck `json:"bottlenecks"`
	// RetryAfter is the distribution of Retry-After over the hour, by who
	// limited (local: the gateway's rules; upstream: the provider's 429s),
	// provider and bucket (RetryBuckets).
	RetryAfter   map[string]map[string]map[string]float64 `json:"retry_after"`
	RetryBuckets []string                                 `json:"retry_buckets"`
	// CacheHeadroom is, per provider, the input tokens served from the
	// prompt cache that no limit was charged for, over the hour.
	CacheHeadroom map[string]float64 `json:"cache_headroom"`
	// FairShare is what each fair-share member of a rule was charged over
	// the hour; borrowing itself is not counted yet (Note says why).
	FairShare fairView `json:"fair_share"`
	StoreCost string   `json:"store_cost"`
}

type named struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

type bottleneck struct {
	Provider string  `json:"provider"`
	Rule     string  `json:"rule"`
	Refusals float64 `json:"refusals"`
	Rules    []named `json:"rules"`
}

type fairView struct {
	Members map[string][]named `json:"members"`
	Note    string             `json:"note"`
}

// fairNote says what borrowing needs that the limiter does not give yet.
const fairNote = "members' charges on fair-share rules; which of them borrowed (used beyond their weighted share while others asked) " +
	"needs the limiter to report, per admission, the member's share and use: not counted yet"

// topN bounds each of the dashboard's top lists.
const topN = 10

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Stats == nil {
		writeError(w, http.StatusNotFound, "not_found", "this store keeps no stats", nil)
		return
	}
	now := h.cfg.Now().UTC().Truncate(time.Minute)
	minutes := make([]time.Time, 60)
	out := statsView{Refusals: map[string][]float64{}, EstimateError: map[string][]*float64{}, StoreCost: StatsCost,
		RetryBuckets: metrics.RetryBuckets}
	var keys []metrics.StatsKey
	for i := range minutes {
		minutes[i] = now.Add(time.Duration(i-59) * time.Minute)
		out.Minutes = append(out.Minutes, minutes[i].Format(time.RFC3339))
		for _, kind := range []string{metrics.StatsRefused, metrics.StatsEstimate, metrics.StatsOps} {
			keys = append(keys, metrics.StatsKey{Kind: kind, At: minutes[i]})
		}
	}
	out.From = minutes[0]
	ctx, cancel := storeCtx(r)
	defer cancel()
	got, err := h.cfg.Stats.ReadStats(ctx, keys)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	p := principalOf(r)
	ops := map[string]float64{}
	for i, m := range minutes {
		for rule, n := range got[metrics.StatsKey{Kind: metrics.StatsRefused, At: m}] {
			if !p.seesID(rule) {
				continue
			}
			if out.Refusals[rule] == nil {
				out.Refusals[rule] = make([]float64, len(minutes))
			}
			out.Refusals[rule][i] = n
		}
		estimate := got[metrics.StatsKey{Kind: metrics.StatsEstimate, At: m}]
		for name, reserved := range estimate {
			route, ok := strings.CutPrefix(name, "reserved:")
			if !ok || reserved <= 0 || !p.master {
				continue
			}
			if out.EstimateError[route] == nil {
				out.EstimateError[route] = make([]*float64, len(minutes))
			}
			ratio := estimate["used:"+route] / reserved
			out.EstimateError[route][i] = &ratio
		}
		for name, v := range got[metrics.StatsKey{Kind: metrics.StatsOps, At: m}] {
			ops[name] += v
		}
	}
	h.operations(p, ops, &out)
	writeJSON(w, http.StatusOK, out)
}

// operations fills in the answers to seed 001's questions from the
// hour's operational counts; a delegated key sees its subtree's user
// paths only.
func (h *Handler) operations(p principal, ops map[string]float64, out *statsView) {
	byPrefix := map[string]map[string]float64{}
	for name, v := range ops {
		prefix, what, ok := strings.Cut(name, ":")
		if !ok {
			continue
		}
		if byPrefix[prefix] == nil {
			byPrefix[prefix] = map[string]float64{}
		}
		byPrefix[prefix][what] += v
	}
	out.TopUserPaths = map[string][]named{}
	for dim, prefix := range map[string]string{"requests": metrics.OpsRequests, "input_tokens": metrics.OpsInputTokens, "output_tokens": metrics.OpsOutputTokens} {
		paths := map[string]float64{}
		for path, v := range byPrefix[prefix] {
			if p.within(path) { // the master's "(other)" too
				paths[path] = v
			}
		}
		out.TopUserPaths[dim] = top(paths, topN)
	}
	out.Outcomes = map[string]map[string][]named{}
	out.RetryAfter = map[string]map[string]map[string]float64{"local": {}, "upstream": {}}
	out.CacheHeadroom = map[string]float64{}
	out.FairShare = fairView{Members: map[string][]named{}, Note: fairNote}
	out.Bottlenecks = []bottleneck{}
	for _, o := range []string{metrics.OutcomeRefused, metrics.OutcomeWaited, metrics.OutcomeUpstream429, metrics.OutcomeFallback, metrics.OutcomeDowngraded} {
		out.Outcomes[o] = map[string][]named{"class": {}, "model": {}}
		if p.master {
			out.Outcomes[o]["class"] = top(byPrefix[o+".class"], 50)
			out.Outcomes[o]["model"] = top(byPrefix[o+".model"], topN)
		}
	}
	if !p.master {
		return
	}
	perProvider := map[string]map[string]float64{}
	for what, v := range byPrefix[metrics.OpsBottleneck] {
		provider, rule, _ := strings.Cut(what, "|")
		if perProvider[provider] == nil {
			perProvider[provider] = map[string]float64{}
		}
		perProvider[provider][rule] += v
	}
	for _, provider := range slices.Sorted(maps.Keys(perProvider)) {
		rs := top(perProvider[provider], 20)
		out.Bottlenecks = append(out.Bottlenecks, bottleneck{Provider: provider, Rule: rs[0].Name, Refusals: rs[0].Value, Rules: rs})
	}
	for limiterType, prefix := range map[string]string{"local": metrics.OpsRetryLocal, "upstream": metrics.OpsRetryUpstream} {
		for what, v := range byPrefix[prefix] {
			provider, bucket, _ := strings.Cut(what, "|")
			if out.RetryAfter[limiterType][provider] == nil {
				out.RetryAfter[limiterType][provider] = map[string]float64{}
			}
			out.RetryAfter[limiterType][provider][bucket] += v
		}
	}
	for provider, v := range byPrefix[metrics.OpsCacheHeadroom] {
		out.CacheHeadroom[provider] = v
	}
	members := map[string]map[string]float64{}
	for what, v := range byPrefix[metrics.OpsFairMember] {
		rule, member, _ := strings.Cut(what, "|")
		if members[rule] == nil {
			members[rule] = map[string]float64{}
		}
		members[rule][member] += v
	}
	for rule, m := range members {
		out.FairShare.Members[rule] = top(m, topN)
	}
}

// top returns the n largest, largest first (ties by name).
func top(m map[string]float64, n int) []named {
	out := make([]named, 0, len(m))
	for k, v := range m {
		out = append(out, named{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b named) int {
		if c := cmp.Compare(b.Value, a.Value); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out[:min(n, len(out))]
}
