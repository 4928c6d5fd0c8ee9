package limiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Rules is an immutable, indexed set of rules. Matching a request looks up
// only the keys the request can match (its path's ancestors, its provider,
// its model), so it costs the same with ten rules or ten thousand.
type Rules struct {
	list []*rule

	paths     map[string]*pathRules     // case-folded path → rules
	providers map[string]*providerRules // case-folded instance name → rules
	bare      map[string][]*rule        // case-folded model id → rules
	tagValues map[string][]*rule        // case-folded "name=value" → rules
	tagNames  map[string][]*rule        // case-folded tag name → each and total rules
	keys      map[string][]*rule        // case-folded key id → rules
	eachKey   []*rule

	// prioritized is set when some rule has a priority, so matching must
	// drop the rules a higher priority overrides.
	prioritized bool
}

// pathRules are the user-path rules of one path: its own, and the
// per_child templates on it, so that a walk down a request's path looks
// each ancestor up once.
type pathRules struct{ rules, perChild []*rule }

// providerRules are a provider's rules and the rules of its models
// (scope model, "provider/model"), by case-folded model id.
type providerRules struct {
	rules  []*rule
	models map[string][]*rule
}

// rule is a Rule with what matching and charging need precomputed.
type rule struct {
	Rule
	key     RuleKey
	counter string // key and generation: the Rule field of its counters
	// span is the Period of the rule's charges (Limit.span).
	span time.Duration
	// charges is how many charges the rule makes, at most: for the
	// planner's allocation.
	charges int
	// bedrock is set on a QuotaBedrock window, whose token charges carry
	// the request's output burndown; fixed on a fixed window.
	bedrock, fixed bool
	// window is a copy of the limit of a window rule, nil for the other
	// kinds, for planning without copying it out of the interface.
	window *Window
	// switchWindows are the first windows of each layout in the shard
	// history of a window rule (see layout.go).
	switchWindows []int64
}

// newRule precomputes r, whose key is key.
func newRule(r Rule, key RuleKey) *rule {
	c := &rule{Rule: r, key: key, counter: string(key), span: r.Limit.span(), charges: 1}
	if r.Generation != "" {
		c.counter += "@" + r.Generation
	}
	if w, ok := r.Limit.(Window); ok {
		c.window = &w
		c.bedrock, c.fixed = w.Quota == QuotaBedrock, w.Fixed
		c.charges = 0
		for _, v := range [...]int64{w.MaxRequests, w.MaxTokens, w.MaxInputTokens, w.MaxOutputTokens} {
			if v > 0 {
				c.charges++
			}
		}
		for _, h := range r.ShardHistory {
			c.switchWindows = append(c.switchWindows, firstWindowFrom(h.Since, w.Period))
		}
	}
	return c
}

// providerRules returns the rules of provider (case-folded), adding an
// empty entry the first time.
func (rs *Rules) providerRules(provider string) *providerRules {
	pr := rs.providers[provider]
	if pr == nil {
		pr = &providerRules{models: map[string][]*rule{}}
		rs.providers[provider] = pr
	}
	return pr
}

// isGauge reports whether the rule limits requests in flight.
func (r *rule) isGauge() bool {
	_, ok := r.Limit.(Gauge)
	return ok
}

// NewRules validates and indexes rules. Every problem is reported, each
// prefixed with the rule it belongs to; two rules with the same Key are an
// error.
func NewRules(rules []Rule) (*Rules, error) {
	rs := &Rules{
		paths:     map[string]*pathRules{},
		providers: map[string]*providerRules{},
		bare:      map[string][]*rule{},
		tagValues: map[string][]*rule{},
		tagNames:  map[string][]*rule{},
		keys:      map[string][]*rule{},
	}
	var errs []error
	seen := make(map[RuleKey]int, len(rules))
	for i, r := range rules {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("rule %d (%s): %w", i, r.Describe(), err))
			continue
		}
		key := r.Key()
		if j, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("rule %d (%s): duplicate of rule %d (same scope, subject and period)", i, r.Describe(), j))
			continue
		}
		seen[key] = i
		c := newRule(r, key)
		rs.prioritized = rs.prioritized || r.Priority != 0
		rs.list = append(rs.list, c)
		subject := strings.ToLower(r.Subject)
		switch r.Scope {
		case ScopeUserPath:
			pr := rs.paths[subject]
			if pr == nil {
				pr = &pathRules{}
				rs.paths[subject] = pr
			}
			if r.PerChild {
				pr.perChild = append(pr.perChild, c)
			} else {
				pr.rules = append(pr.rules, c)
			}
		case ScopeProvider:
			pr := rs.providerRules(subject)
			pr.rules = append(pr.rules, c)
		case ScopeModel:
			if p, m, ok := strings.Cut(subject, "/"); ok {
				pr := rs.providerRules(p)
				pr.models[m] = append(pr.models[m], c)
			} else {
				rs.bare[subject] = append(rs.bare[subject], c)
			}
		case ScopeTag:
			name, value, isValue := strings.Cut(subject, "=")
			if isValue && value != EachValue {
				rs.tagValues[subject] = append(rs.tagValues[subject], c)
			} else {
				rs.tagNames[name] = append(rs.tagNames[name], c) // each and total
			}
		case ScopeKey:
			if r.PerChild {
				rs.eachKey = append(rs.eachKey, c)
			} else {
				rs.keys[subject] = append(rs.keys[subject], c)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rs, nil
}

// List returns the rules in the order they were given.
func (rs *Rules) List() []Rule {
	out := make([]Rule, len(rs.list))
	for i, r := range rs.list {
		out[i] = r.Rule
	}
	return out
}

// Len returns the number of rules.
func (rs *Rules) Len() int { return len(rs.list) }

// Lookup returns the rule with key k.
func (rs *Rules) Lookup(k RuleKey) (Rule, bool) {
	i := slices.IndexFunc(rs.list, func(r *rule) bool { return r.key == k })
	if i < 0 {
		return Rule{}, false
	}
	return rs.list[i].Rule, true
}

// Subject is what a request is matched on.
type Subject struct {
	UserPath string // a valid user path, see ParseUserPath
	Provider string // the resolved provider instance; "" skips provider and model rules
	Model    string // the model id at that provider
	Key      string // the managed key's id; "" for none
	Tags     []Tag  // valid tags (ParseTags), at most MaxTags
}

// match is one rule that applies to a request, with the child segment that
// a per_child rule counts under.
type match struct {
	rule  *rule
	child string
}

// appendMatches appends every rule that applies to s, in a fixed order:
// user-path rules from the root down, then tag and key rules, then
// provider rules, then model rules (qualified before bare). Rules that a
// higher priority overrides are left out.
func (rs *Rules) appendMatches(dst []match, s Subject, consumerOnly bool) []match {
	dst = rs.appendAll(dst, s, consumerOnly)
	if rs.prioritized {
		dst = keepPrioritized(dst)
	}
	return dst
}

// keepPrioritized drops the rules that a rule of higher priority in the
// same scope overrides; budgets and always rules stay.
func keepPrioritized(ms []match) []match {
	var top [ScopeKey + 1]int
	var seen [ScopeKey + 1]bool
	for _, m := range ms {
		if r := m.rule; !r.overridable() {
			continue
		} else if !seen[r.Scope] || r.Priority > top[r.Scope] {
			top[r.Scope], seen[r.Scope] = r.Priority, true
		}
	}
	out := ms[:0]
	for _, m := range ms {
		if r := m.rule; !r.overridable() || r.Priority == top[r.Scope] {
			out = append(out, m)
		}
	}
	return out
}

// overridable reports whether a higher priority can override the rule.
func (r *rule) overridable() bool {
	_, budget := r.Limit.(Budget)
	return !r.Always && !budget
}

// overridden returns the matches of all that keepPrioritized dropped.
func overridden(all []match) []match {
	kept := keepPrioritized(slices.Clone(all))
	var out []match
	for _, m := range all {
		if !slices.ContainsFunc(kept, func(k match) bool { return k.rule == m.rule && k.child == m.child }) {
			out = append(out, m)
		}
	}
	return out
}

// appendAll is appendMatches before priorities.
func (rs *Rules) appendAll(dst []match, s Subject, consumerOnly bool) []match {
	path := strings.ToLower(s.UserPath)
	// Walk the ancestors of path ("/", "/a", "/a/b", …, path), each looked
	// up once. A per_child template on an ancestor counts under the
	// segment that follows it.
	var at pathRules
	if pr := rs.paths["/"]; pr != nil {
		at = *pr
	}
	for _, r := range at.rules {
		dst = append(dst, match{rule: r})
	}
	for start := 1; start < len(path); {
		end := len(path)
		if i := strings.IndexByte(path[start:], '/'); i >= 0 {
			end = start + i
		}
		for _, r := range at.perChild {
			dst = append(dst, match{rule: r, child: path[start:end]})
		}
		at, start = pathRules{}, end+1
		if pr := rs.paths[path[:end]]; pr != nil {
			at = *pr
		}
		for _, r := range at.rules {
			dst = append(dst, match{rule: r})
		}
	}
	for _, t := range s.Tags {
		name := strings.ToLower(t.Name)
		value := strings.ToLower(t.Value)
		for _, r := range rs.tagValues[name+"="+value] {
			dst = append(dst, match{rule: r})
		}
		for _, r := range rs.tagNames[name] {
			m := match{rule: r}
			if r.PerChild {
				m.child = value
			}
			dst = append(dst, m)
		}
	}
	if s.Key != "" {
		key := strings.ToLower(s.Key)
		for _, r := range rs.eachKey {
			dst = append(dst, match{rule: r, child: key})
		}
		for _, r := range rs.keys[key] {
			dst = append(dst, match{rule: r})
		}
	}
	if consumerOnly || s.Provider == "" {
		return dst
	}
	provider := strings.ToLower(s.Provider)
	model := strings.ToLower(s.Model)
	if pr := rs.providers[provider]; pr != nil {
		for _, r := range pr.rules {
			dst = append(dst, match{rule: r})
		}
		for _, r := range pr.models[model] {
			dst = append(dst, match{rule: r})
		}
	}
	for _, r := range rs.bare[model] {
		dst = append(dst, match{rule: r})
	}
	return dst
}
