package adminapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/limiter"
)

// Budgets are rules that limit money (limiter.Rule.MaxCost), kept in the
// same store with the same versions, marks and conflicts as rate limits,
// and shown apart, in dollars.

// budgetInput is a PUT /admin/budgets body.
type budgetInput struct {
	identity
	// AmountUSD is a decimal amount: a JSON string ("5.00") or number.
	AmountUSD json.Number `json:"amount_usd"`
	PerChild  bool        `json:"per_child"`
	Shadow    bool        `json:"shadow"`
	Version   int64       `json:"version"`
	From      *identity   `json:"from"`
}

// budgetView is a budget as the API shows it.
type budgetView struct {
	Key       string       `json:"key"`
	Scope     string       `json:"scope"`
	Subject   string       `json:"subject"`
	Period    string       `json:"period"`
	AmountUSD string       `json:"amount_usd"`
	PerChild  bool         `json:"per_child"`
	Shadow    bool         `json:"shadow,omitempty"`
	Source    string       `json:"source"`
	Version   int64        `json:"version,omitempty"`
	UpdatedAt *time.Time   `json:"updated_at,omitempty"`
	Usage     *budgetUsage `json:"usage"`
	Note      string       `json:"note,omitempty"`
}

// budgetUsage is a budget's current period: spent (settled), reserved by
// requests not yet settled, and what is left, in dollars.
type budgetUsage struct {
	SpentUSD     string    `json:"spent_usd"`
	ReservedUSD  string    `json:"reserved_usd"`
	RemainingUSD string    `json:"remaining_usd"`
	PeriodStart  time.Time `json:"period_start"`
	PeriodEnd    time.Time `json:"period_end"`
}

func budgetViewOf(r limiter.Rule, version int64, updated time.Time) budgetView {
	v := budgetView{
		Key: string(r.Key()), Scope: r.Scope.String(), Subject: r.Subject, Period: r.Calendar.String(),
		AmountUSD: limiter.FormatUSD(r.MaxCost), PerChild: r.PerChild, Shadow: r.Shadow, Source: r.Source.String(), Version: version,
	}
	if !updated.IsZero() {
		v.UpdatedAt = &updated
	}
	if r.PerChild {
		v.Note = "counted per child; a child's spending is at GET /v1/usage"
	}
	return v
}

func budgetUsageOf(u limiter.RuleUsage) *budgetUsage {
	if len(u.Dimensions) != 1 {
		return nil
	}
	d := u.Dimensions[0]
	return &budgetUsage{
		SpentUSD:     limiter.FormatUSD(max(0, d.Used-d.Reserved)),
		ReservedUSD:  limiter.FormatUSD(d.Reserved),
		RemainingUSD: limiter.FormatUSD(d.Remaining),
		PeriodStart:  u.WindowStart.UTC(),
		PeriodEnd:    u.WindowEnd.UTC(),
	}
}

func (h *Handler) listBudgets(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	snap, err := h.cfg.Store.Snapshot(ctx)
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	if err := h.cfg.Watcher.Load(ctx); err != nil {
		h.storeFailed(w, err)
		return
	}
	live, err := h.cfg.Limiter.AllUsage(ctx, h.cfg.Now())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	usage := map[limiter.RuleKey]limiter.RuleUsage{}
	for _, u := range live {
		usage[u.Rule.Key()] = u
	}
	out := []budgetView{}
	for _, cr := range h.cfg.ConfigRules {
		if cr.IsBudget() {
			out = append(out, budgetViewOf(cr, 0, time.Time{}))
		}
	}
	for _, m := range snap.Rules {
		if _, shadowed := h.config[m.Key()]; !shadowed && m.IsBudget() {
			out = append(out, budgetViewOf(m.Rule, m.Version, m.UpdatedAt))
		}
	}
	for i := range out {
		if u, ok := usage[limiter.RuleKey(out[i].Key)]; ok {
			out[i].Usage = budgetUsageOf(u)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"budgets": out, "version": snap.Version})
}

func (h *Handler) putBudget(w http.ResponseWriter, r *http.Request) {
	var in budgetInput
	if !decode(w, r, &in) {
		return
	}
	var errs []fieldError
	rule := in.identity.rule("", &errs, true)
	rule.PerChild = rule.PerChild || in.PerChild
	rule.Shadow, rule.Source = in.Shadow, limiter.SourceManual
	if in.AmountUSD == "" {
		errs = append(errs, fieldError{Field: "amount_usd", Message: "required: dollars per period, e.g. \"5.00\""})
	} else if v, err := limiter.ParseUSD(strings.Trim(string(in.AmountUSD), `"`)); err != nil {
		errs = append(errs, fieldError{Field: "amount_usd", Message: err.Error()})
	} else {
		rule.MaxCost = v
	}
	if in.Version < 0 {
		errs = append(errs, fieldError{Field: "version", Message: "must not be negative"})
	}
	if in.LimitKey != nil || in.Unit != "" {
		errs = append(errs, fieldError{Field: "limit_key", Message: "a budget has a period (hour, day, week, month) only"})
	}
	from := limiter.RuleKey("")
	if in.From != nil {
		from = in.From.rule("from.", &errs, true).Key()
	}
	errs = withProblems(errs, rule)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	h.saveRule(w, r, rule, from, in.Version, "budget", func(cr configstore.Rule) any { return budgetViewOf(cr.Rule, cr.Version, cr.UpdatedAt) })
}

func (h *Handler) deleteBudget(w http.ResponseWriter, r *http.Request) { h.deleteOne(w, r, true) }

func (h *Handler) resetBudget(w http.ResponseWriter, r *http.Request) { h.resetOneOf(w, r, true) }
