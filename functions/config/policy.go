package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // budget_timezone without the system's zone database (Lambda has none)

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers/pricing"
)

// The policy sections of the file beyond rate limits on paths, providers
// and models: tag and key rules, budgets, prices and the budgets' zone.

// usdText is an amount of dollars as written, parsed exactly (a YAML
// float would round 0.1).
type usdText struct {
	set  bool
	text string
}

func (u *usdText) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want an amount of dollars", n.Line)
	}
	u.set, u.text = true, n.Value
	return nil
}

// UnmarshalJSON takes a number or a string.
func (u *usdText) UnmarshalJSON(b []byte) error {
	u.set, u.text = true, strings.Trim(string(b), `"`)
	return nil
}

func (u usdText) micros(field string) (int64, error) {
	if !u.set {
		return 0, fmt.Errorf("%s: missing", field)
	}
	v, err := limiter.ParseUSD(u.text)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return v, nil
}

// tagRuleSpec is a rate limit on a tag: one value, each value, or total.
type tagRuleSpec struct {
	Tag    string      `yaml:"tag"`
	Value  string      `yaml:"value"`
	Limits []limitSpec `yaml:"limits"`
}

// keyRuleSpec is a rate limit on managed keys: each key, or one key's id.
type keyRuleSpec struct {
	Key    string      `yaml:"key"`
	Limits []limitSpec `yaml:"limits"`
}

// budgetAmount is what every budget entry has.
type budgetAmount struct {
	AmountUSD usdText `yaml:"amount_usd"`
	Period    string  `yaml:"period"`
	Shadow    bool    `yaml:"shadow"`
	// FairShare shares the budget among its members by weight.
	FairShare *fairShareSpec `yaml:"fair_share"`
}

type budgetsSpec struct {
	UserPaths []struct {
		Path         string `yaml:"path"`
		PerChild     bool   `yaml:"per_child"`
		budgetAmount `yaml:",inline"`
	} `yaml:"user_paths"`
	Providers []struct {
		Name         string `yaml:"name"`
		budgetAmount `yaml:",inline"`
	} `yaml:"providers"`
	Models []struct {
		Model        string `yaml:"model"`
		budgetAmount `yaml:",inline"`
	} `yaml:"models"`
	Keys []struct {
		Key          string `yaml:"key"`
		budgetAmount `yaml:",inline"`
	} `yaml:"keys"`
	Tags []struct {
		Tag          string `yaml:"tag"`
		Value        string `yaml:"value"`
		budgetAmount `yaml:",inline"`
	} `yaml:"tags"`
}

// priceSpec is one model's price in USD per million tokens; cached input
// costs what input does unless it is given.
type priceSpec struct {
	Input       usdText `yaml:"input" json:"input"`
	Output      usdText `yaml:"output" json:"output"`
	CachedInput usdText `yaml:"cached_input" json:"cached_input"`
}

// Price reads a price spec.
func (p priceSpec) price() (limiter.Price, error) {
	var errs []error
	in, err := p.Input.micros("input")
	errs = append(errs, err)
	out, err := p.Output.micros("output")
	errs = append(errs, err)
	cached := in
	if p.CachedInput.set {
		cached, err = p.CachedInput.micros("cached_input")
		errs = append(errs, err)
	}
	return limiter.Price{Input: in, Output: out, CachedInput: cached}, errors.Join(errs...)
}

// TagSubject is the subject of a tag rule or budget: "k=v" for a value,
// "k=*" counting each value apart (each), "k" counting all together
// (total).
func TagSubject(tag, value string) (subject string, perChild bool, err error) {
	switch value {
	case "":
		return "", false, errors.New("value: missing (want a value, each or total)")
	case "each":
		return tag + "=" + limiter.EachValue, true, nil
	case "total":
		return tag, false, nil
	}
	return tag + "=" + value, false, nil
}

// KeySubject is the subject of a key rule or budget: each key, or one id.
func KeySubject(key string) (subject string, perChild bool) {
	if key == "each" {
		return limiter.EachKey, true
	}
	return key, false
}

// BudgetRule builds a budget; every problem is returned together.
func BudgetRule(scope limiter.Scope, subject string, perChild bool, amount usdText, period string, shadow bool) (limiter.Rule, error) {
	r := limiter.Rule{Scope: scope, Subject: subject, PerChild: perChild, Shadow: shadow, Source: limiter.SourceConfig}
	var errs []error
	cost, err := amount.micros("amount_usd")
	errs = append(errs, err)
	if err == nil && cost == 0 {
		errs = append(errs, errors.New("amount_usd: a budget needs an amount above 0"))
	}
	b := limiter.Budget{MaxCost: cost}
	if period == "" {
		errs = append(errs, errors.New("period: missing (want hour, day, week or month)"))
	} else {
		b.Calendar, err = limiter.ParseCalendar(period)
		errs = append(errs, err)
	}
	r.Limit = b
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	return r, r.Validate()
}

// loadPolicy reads what the consumer side of a file sets: tag and key
// rate limits, budgets and their time zone, and prices.
func (cfg *Config) loadPolicy(f *file, at func(keys ...any) string) error {
	var errs []error
	if rl := f.RateLimits; rl != nil {
		errs = append(errs, cfg.loadConsumerLimits(rl, at)...)
	}
	if b := f.Budgets; b != nil {
		errs = append(errs, cfg.loadBudgets(b, at)...)
	}
	if f.BudgetTimezone != "" {
		loc, err := time.LoadLocation(f.BudgetTimezone)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: unknown time zone %q", at("budget_timezone"), f.BudgetTimezone))
		} else {
			cfg.BudgetLocation = loc
		}
	}
	errs = append(errs, cfg.loadPrices(f.Prices, at)...)
	return errors.Join(errs...)
}

// loadConsumerLimits reads rate_limits' tags and keys.
func (cfg *Config) loadConsumerLimits(rl *rateLimits, at func(keys ...any) string) []error {
	var errs []error
	for i, t := range rl.Tags {
		subject, each, err := TagSubject(t.Tag, t.Value)
		if t.Tag == "" {
			err = errors.Join(err, errors.New("tag: missing"))
		}
		if err != nil {
			errs = append(errs, prefix(at("rate_limits", "tags", i), err))
			continue
		}
		errs = append(errs, cfg.addLimits(at, []any{"rate_limits", "tags", i}, limiter.ScopeTag, subject, each, t.Limits)...)
		if len(t.Limits) == 0 {
			errs = append(errs, fmt.Errorf("%s: no limits", at("rate_limits", "tags", i)))
		}
	}
	for i, k := range rl.Keys {
		if k.Key == "" {
			errs = append(errs, fmt.Errorf("%s: key is missing (want each or a key id)", at("rate_limits", "keys", i)))
			continue
		}
		subject, each := KeySubject(k.Key)
		errs = append(errs, cfg.addLimits(at, []any{"rate_limits", "keys", i}, limiter.ScopeKey, subject, each, k.Limits)...)
		if len(k.Limits) == 0 {
			errs = append(errs, fmt.Errorf("%s: no limits", at("rate_limits", "keys", i)))
		}
	}
	return errs
}

// loadBudgets reads budgets, of every scope, into budget rules.
func (cfg *Config) loadBudgets(b *budgetsSpec, at func(keys ...any) string) []error {
	var errs []error
	budget := func(where string, scope limiter.Scope, subject, missing string, perChild bool, a budgetAmount) {
		if subject == "" {
			errs = append(errs, fmt.Errorf("%s: %s is missing", where, missing))
			return
		}
		r, err := BudgetRule(scope, subject, perChild, a.AmountUSD, a.Period, a.Shadow)
		if err == nil && a.FairShare != nil {
			r.FairShare = a.FairShare.fairShare()
			err = r.Validate()
		}
		errs = append(errs, prefix(where, err))
		cfg.Rules = appendIfValid(cfg.Rules, r, err)
	}
	for i, u := range b.UserPaths {
		budget(at("budgets", "user_paths", i), limiter.ScopeUserPath, u.Path, "path", u.PerChild, u.budgetAmount)
	}
	for i, p := range b.Providers {
		budget(at("budgets", "providers", i), limiter.ScopeProvider, p.Name, "name", false, p.budgetAmount)
	}
	for i, m := range b.Models {
		budget(at("budgets", "models", i), limiter.ScopeModel, m.Model, "model", false, m.budgetAmount)
	}
	for i, k := range b.Keys {
		subject, each := KeySubject(k.Key)
		budget(at("budgets", "keys", i), limiter.ScopeKey, subject, "key", each, k.budgetAmount)
	}
	for i, t := range b.Tags {
		where := at("budgets", "tags", i)
		subject, each, err := TagSubject(t.Tag, t.Value)
		if err != nil {
			errs = append(errs, prefix(where, err))
			continue
		}
		if t.Tag == "" {
			subject = ""
		}
		budget(where, limiter.ScopeTag, subject, "tag", each, t.budgetAmount)
	}
	return errs
}

// loadPrices reads prices: per model or provider/model, and the default.
func (cfg *Config) loadPrices(prices map[string]priceSpec, at func(keys ...any) string) []error {
	var errs []error
	cfg.Prices = map[string]limiter.Price{}
	keys := make([]string, 0, len(prices))
	for k := range prices {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p, err := prices[k].price()
		if err != nil {
			errs = append(errs, prefix(at("prices", k), err))
			continue
		}
		if k == "default" {
			cfg.DefaultPrice = &p
			continue
		}
		if strings.TrimSpace(k) == "" || strings.ContainsAny(k, " \t") {
			errs = append(errs, fmt.Errorf("%s: %q is not a model or provider/model", at("prices"), k))
			continue
		}
		cfg.Prices[k] = p
	}
	return errs
}

// PriceTable is the configured prices over the built-in ones.
func (cfg *Config) PriceTable() *pricing.Table { return pricing.New(cfg.Prices, cfg.DefaultPrice) }

const budgetPrefix = "SET_BUDGET_"

// budgetsFromEnv reads SET_BUDGET_<PATH>=usd=50/month (several,
// comma-separated, for several periods), the path spelled as for
// SET_RATE_LIMIT_.
func budgetsFromEnv(env Env) ([]limiter.Rule, error) {
	var names []string
	for k := range env {
		if strings.HasPrefix(k, budgetPrefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var rules []limiter.Rule
	var errs []error
	for _, name := range names {
		path := envPath(name[len(budgetPrefix):])
		var problems []error
		for item := range strings.SplitSeq(env[name], ",") {
			item = strings.TrimSpace(item)
			k, v, ok := strings.Cut(item, "=")
			amount, period, ok2 := strings.Cut(v, "/")
			if !ok || !ok2 || strings.TrimSpace(k) != "usd" {
				problems = append(problems, fmt.Errorf("%q: want usd=<amount>/<hour|day|week|month>", item))
				continue
			}
			r, err := BudgetRule(limiter.ScopeUserPath, path, false, usdText{set: true, text: amount}, strings.TrimSpace(period), false)
			if err != nil {
				problems = append(problems, err)
				continue
			}
			rules = append(rules, r)
		}
		errs = append(errs, prefix(name, errors.Join(problems...)))
	}
	return rules, errors.Join(errs...)
}

// budgetLocationFromEnv applies TOLLGATE_BUDGET_TIMEZONE over the file's.
func (cfg *Config) budgetLocationFromEnv(env Env) error {
	v := env["TOLLGATE_BUDGET_TIMEZONE"]
	if v == "" {
		return nil
	}
	loc, err := time.LoadLocation(v)
	if err != nil {
		return fmt.Errorf("TOLLGATE_BUDGET_TIMEZONE: unknown time zone %q", v)
	}
	cfg.BudgetLocation = loc
	return nil
}

// WithBudgetLocation returns rules with every budget's zone set to loc.
func WithBudgetLocation(rules []limiter.Rule, loc *time.Location) []limiter.Rule {
	for i := range rules {
		if b, ok := rules[i].Limit.(limiter.Budget); ok {
			b.Location = loc
			rules[i].Limit = b
		}
	}
	return rules
}
