package adminapi

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Budgets are rules that limit money (a limiter.Budget), kept in the
// same store with the same versions, marks and conflicts as rate limits,
// and shown apart, in dollars.

// budgetInput is a PUT /admin/budgets body.
type budgetInput struct {
	identity
	// AmountUSD is a decimal amount: a JSON string ("5.00") or number.
	AmountUSD json.Number `json:"amount_usd"`
	PerChild  bool        `json:"per_child"`
	Shadow    bool        `json:"shadow"`
	FairShare *fairJSON   `json:"fair_share"`
	Version   int64       `json:"version"`
	From      *identity   `json:"from"`
}

// budgetView is a budget as the API shows it.
type budgetView struct {
	ID        string       `json:"id"`
	Scope     string       `json:"scope"`
	Subject   string       `json:"subject"`
	Period    string       `json:"period"`
	AmountUSD string       `json:"amount_usd"`
	PerChild  bool         `json:"per_child"`
	Shadow    bool         `json:"shadow,omitempty"`
	FairShare *fairJSON    `json:"fair_share,omitempty"`
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
	b, _ := r.Limit.(limiter.Budget)
	v := budgetView{
		ID: r.ID(), Scope: r.Scope.String(), Subject: r.Subject, Period: b.Calendar.String(),
		AmountUSD: limiter.FormatUSD(b.MaxCost), PerChild: r.PerChild, Shadow: r.Shadow, Source: r.Source.String(), Version: version,
		FairShare: fairJSONOf(r.FairShare),
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

// build checks a budget body; see ruleInput.build.
func (in *budgetInput) build(base *limiter.Rule, errs *[]fieldError) limiter.Rule {
	rule := in.identity.ruleOr(base, errs, true)
	rule.PerChild = rule.PerChild || in.PerChild
	rule.Shadow, rule.Source = in.Shadow, limiter.SourceManual
	rule.FairShare = nil
	if f := in.FairShare; f != nil {
		rule.FairShare = &limiter.FairShare{By: f.By, Weights: f.Weights, DefaultWeight: f.DefaultWeight, MaxMembers: f.MaxMembers}
	}
	if in.AmountUSD == "" {
		*errs = append(*errs, fieldError{Field: "amount_usd", Message: "required: dollars per period, e.g. \"5.00\""})
	} else if v, err := limiter.ParseUSD(strings.Trim(string(in.AmountUSD), `"`)); err != nil {
		*errs = append(*errs, fieldError{Field: "amount_usd", Message: err.Error()})
	} else {
		b, _ := rule.Limit.(limiter.Budget)
		b.MaxCost = v
		rule.Limit = b
	}
	if in.LimitKey != nil || in.Unit != "" {
		*errs = append(*errs, fieldError{Field: "limit_key", Message: "a budget has a period (hour, day, week, month) only"})
	}
	return rule
}

func (in *budgetInput) version() int64     { return in.Version }
func (in *budgetInput) from() *identity    { return in.From }
func (in *budgetInput) names() *identity   { return &in.identity }
func (in *budgetInput) setVersion(v int64) { in.Version = v }

var budgets = &kind{
	what: "budget", budget: true, collection: "/admin/budgets", listKey: "budgets",
	newInput: func() input { return &budgetInput{} },
	inputOf: func(r limiter.Rule) input {
		b, _ := r.Limit.(limiter.Budget)
		return &budgetInput{AmountUSD: json.Number(limiter.FormatUSD(b.MaxCost)), PerChild: r.PerChild, Shadow: r.Shadow,
			FairShare: fairJSONOf(r.FairShare)}
	},
	view: func(r limiter.Rule, v int64, at time.Time) any { return budgetViewOf(r, v, at) },
	viewWithUsage: func(r limiter.Rule, v int64, at time.Time, u *limiter.RuleUsage) any {
		view := budgetViewOf(r, v, at)
		if u != nil {
			view.Usage = budgetUsageOf(*u)
		}
		return view
	},
}
