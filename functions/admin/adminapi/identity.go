package adminapi

import (
	"fmt"
	"strings"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/limiter"
)

// limitKey names a period: {"period": "minute"}, {"period_seconds": 300},
// or {"period": "bucket"} for a token bucket.
type limitKey struct {
	Period        string `json:"period,omitempty"`
	PeriodSeconds int64  `json:"period_seconds,omitempty"`
}

// identity names a rule or a budget: its subject, in one of the
// shorthands or as scope and subject, and its period.
type identity struct {
	// ID is the rule's canonical id (limiter.Rule.ID), instead of the
	// fields below.
	ID       string `json:"id,omitempty"`
	Scope    string `json:"scope,omitempty"`
	Subject  string `json:"subject,omitempty"`
	UserPath string `json:"user_path,omitempty"`
	// Tag and Value name a tag subject: a value, each or total.
	Tag   string `json:"tag,omitempty"`
	Value string `json:"value,omitempty"`
	// Key names a key subject: each, or a key's id.
	Key      string    `json:"key,omitempty"`
	LimitKey *limitKey `json:"limit_key,omitempty"`
	// Period is reset-one's form of limit_key (a name or a number of
	// seconds), and a budget's period (hour, day, week, month).
	Period any `json:"period,omitempty"`
	// Unit tells a requests bucket from a tokens bucket.
	Unit string `json:"unit,omitempty"`
}

// given reports whether any field names a rule.
func (id *identity) given() bool {
	return id.ID != "" || id.Scope != "" || id.Subject != "" || id.UserPath != "" || id.Tag != "" || id.Value != "" ||
		id.Key != "" || id.LimitKey != nil || id.Period != nil || id.Unit != ""
}

// ruleOr returns base when the URL named the rule (the body must not name
// another), else the rule the identity names.
func (id *identity) ruleOr(base *limiter.Rule, errs *[]fieldError, budget bool) limiter.Rule {
	if base == nil {
		return id.rule("", errs, budget)
	}
	if id.given() {
		*errs = append(*errs, fieldError{Field: "id", Message: "the URL names the " + kindWord(budget) +
			`; to move it, PUT to the collection with "from"`})
	}
	r := *base
	return r
}

func kindWord(budget bool) string {
	if budget {
		return "budget"
	}
	return "rule"
}

// isBudget reports whether r limits money.
func isBudget(r limiter.Rule) bool {
	_, ok := r.Limit.(limiter.Budget)
	return ok
}

// byID returns the identity an id names, checking it is of the kind
// asked for.
func byID(id string, budget bool) (limiter.Rule, error) {
	if budget && !strings.HasPrefix(id, "budget:") {
		id = "budget:" + id
	}
	r, err := limiter.ParseRuleID(id)
	if err != nil {
		return limiter.Rule{}, err
	}
	if isBudget(r) != budget {
		if budget {
			return limiter.Rule{}, fmt.Errorf("%s is a rate limit, not a budget: see /admin/rate-limits", id)
		}
		return limiter.Rule{}, fmt.Errorf("%s is a budget: see /admin/budgets", id)
	}
	return r, nil
}

// rule turns an identity into the rule it names (scope, subject,
// per_child for each-subjects, and its limit's kind and period, with no
// limits set), appending what is wrong to errs: by its id, or by its
// fields. budget reads Period as a budget's calendar period. A rule whose
// period could not be read has no limit.
func (id identity) rule(prefix string, errs *[]fieldError, budget bool) limiter.Rule {
	bad := func(f, m string) { *errs = append(*errs, fieldError{Field: prefix + f, Message: m}) }
	if id.ID != "" {
		other := id
		other.ID = ""
		if other.given() {
			bad("id", "give id or the fields that name a rule, not both")
		}
		byid, err := byID(id.ID, budget)
		if err != nil {
			bad("id", err.Error())
		}
		return byid
	}
	r := id.subject(bad)
	if id.Value != "" && id.Tag == "" {
		bad("value", "value goes with tag")
	}
	if budget {
		r.Limit = id.budgetPeriod(bad)
	} else {
		r.Limit = id.limitKind(bad)
	}
	return r
}

// subject reads the rule's scope and subject: one of the shorthands
// (user_path, tag with value, key), or scope with subject.
func (id identity) subject(bad func(field, message string)) limiter.Rule {
	var r limiter.Rule
	shorthands := 0
	for _, s := range []string{id.UserPath, id.Tag, id.Key} {
		if s != "" {
			shorthands++
		}
	}
	switch {
	case shorthands > 1 || shorthands == 1 && (id.Scope != "" || id.Subject != ""):
		bad("subject", "give one of user_path, tag (with value), key, or scope with subject")
	case id.UserPath != "":
		r.Scope, r.Subject = limiter.ScopeUserPath, id.UserPath
	case id.Tag != "":
		subject, each, err := config.TagSubject(id.Tag, id.Value)
		if err != nil {
			bad("value", err.Error())
		}
		r.Scope, r.Subject, r.PerChild = limiter.ScopeTag, subject, each
	case id.Key != "":
		r.Scope = limiter.ScopeKey
		r.Subject, r.PerChild = config.KeySubject(id.Key)
	case id.Scope == "":
		bad("scope", "required (user_path, provider, model, tag or key), or give user_path, tag or key")
	default:
		s, err := limiter.ParseScope(id.Scope)
		if err != nil {
			bad("scope", err.Error())
		}
		r.Scope, r.Subject = s, id.Subject
		if r.Subject == "" {
			bad("subject", "required")
		}
		r.PerChild = (s == limiter.ScopeKey && r.Subject == limiter.EachKey) || (s == limiter.ScopeTag && hasEachValue(r.Subject))
	}
	return r
}

// budgetPeriod is the budget that Period names (hour, day, week, month).
func (id identity) budgetPeriod(bad func(field, message string)) limiter.Limit {
	if id.LimitKey != nil {
		bad("limit_key", "a budget has a period (hour, day, week, month), not a limit_key")
	}
	p, _ := id.Period.(string)
	c, err := limiter.ParseCalendar(p)
	if err != nil {
		bad("period", err.Error())
	}
	return limiter.Budget{Calendar: c}
}

// limitKind is the limit the limit_key names (or reset-one's period): a
// window of a period, the gauge (concurrent) or a bucket (with its unit);
// nil when it names none.
func (id identity) limitKind(bad func(field, message string)) limiter.Limit {
	lk := id.LimitKey
	if lk == nil && id.Period != nil {
		switch p := id.Period.(type) {
		case string:
			lk = &limitKey{Period: p}
		case float64:
			lk = &limitKey{PeriodSeconds: int64(p)}
		default:
			bad("period", "a name (minute, hour, day, concurrent, bucket) or a number of seconds")
			return nil
		}
	}
	var l limiter.Limit
	switch {
	case lk == nil:
		bad("limit_key", `required: {"period": "minute"}, {"period_seconds": 300} or {"period": "bucket"}`)
	case lk.Period != "" && lk.PeriodSeconds != 0:
		bad("limit_key", "give period or period_seconds, not both")
	case lk.Period == "bucket":
		b := limiter.Bucket{}
		switch id.Unit {
		case "", "requests":
		case "tokens":
			b.Tokens = true
		default:
			bad("unit", "requests or tokens")
		}
		return b
	case lk.Period == limiter.PeriodConcurrent:
		l = limiter.Gauge{}
	case lk.Period == limiter.PeriodStreams:
		l = limiter.Gauge{Streams: true}
	case lk.Period != "":
		p, err := limiter.ParsePeriod(lk.Period)
		if err != nil {
			bad("limit_key.period", err.Error())
			break
		}
		l = limiter.Window{Period: p}
	case lk.PeriodSeconds > 0:
		l = limiter.Window{Period: time.Duration(lk.PeriodSeconds) * time.Second}
	default:
		bad("limit_key.period_seconds", "must be at least 1")
	}
	if id.Unit != "" {
		bad("unit", "only a bucket has a unit")
	}
	return l
}

func hasEachValue(subject string) bool {
	n := len(subject)
	return n >= 2 && subject[n-2:] == "="+limiter.EachValue
}

// limitKeyOf is the limit_key that names r's period.
func limitKeyOf(r limiter.Rule) limitKey {
	switch l := r.Limit.(type) {
	case limiter.Bucket:
		return limitKey{Period: "bucket"}
	case limiter.Gauge:
		if l.Streams {
			return limitKey{Period: limiter.PeriodStreams}
		}
		return limitKey{Period: limiter.PeriodConcurrent}
	case limiter.Window:
		switch l.Period {
		case limiter.Minute, limiter.Hour, limiter.Day:
			return limitKey{Period: limiter.PeriodName(l.Period)}
		}
		return limitKey{PeriodSeconds: int64(l.Period / time.Second)}
	}
	return limitKey{}
}
