package limiter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scope says what a rule protects.
type Scope uint8

const (
	// ScopeUserPath limits consumers: a rule on /team covers /team and every
	// path below it, but not /team-alpha. A rule on / covers all traffic.
	ScopeUserPath Scope = iota + 1
	// ScopeProvider protects an upstream: the subject is a provider instance
	// name, shared by every consumer and model routed to it.
	ScopeProvider
	// ScopeModel protects a model: "openai/gpt-4o" is one provider's model,
	// a bare "gpt-4o" is that model on every provider.
	ScopeModel
	// ScopeTag limits the requests that carry a tag (X-Tollgate-Tags, or
	// fixed on a managed key). The subject is "k=v" for one value; "k=*"
	// with PerChild for each value its own counters (each); the tag's
	// name "k" for one counter every request carrying it shares (total).
	ScopeTag
	// ScopeKey limits the requests of managed keys: the subject is one
	// key's id, or "*" with PerChild for each key its own counters.
	ScopeKey
)

// EachKey is the subject of a key rule that counts each key on its own,
// and EachValue the value of a tag rule that counts each value on its own
// ("feature=*").
const (
	EachKey   = "*"
	EachValue = "*"
)

// String returns the scope's name as used in config and the admin API.
func (s Scope) String() string {
	switch s {
	case ScopeUserPath:
		return "user_path"
	case ScopeProvider:
		return "provider"
	case ScopeModel:
		return "model"
	case ScopeTag:
		return "tag"
	case ScopeKey:
		return "key"
	}
	return "scope(" + strconv.Itoa(int(s)) + ")"
}

// ParseScope is the inverse of Scope.String.
func ParseScope(s string) (Scope, error) {
	switch s {
	case "user_path":
		return ScopeUserPath, nil
	case "provider":
		return ScopeProvider, nil
	case "model":
		return ScopeModel, nil
	case "tag":
		return ScopeTag, nil
	case "key":
		return ScopeKey, nil
	}
	return 0, fmt.Errorf("unknown scope %q (want user_path, provider, model, tag or key)", s)
}

// PeriodConcurrent is the period name of a gauge (Gauge) in config, the
// admin API and rule IDs.
const PeriodConcurrent = "concurrent"

// PeriodStreams is the period name of a gauge of streaming requests
// (Gauge.Streams; config's max_streams): its rule id ends in ":streams".
const PeriodStreams = "streams"

// MaxSlotsPerShard bounds a concurrency rule's slots per shard: a store
// may keep one shard's slots in one item (the DynamoDB store keeps the
// ids of the leases holding them), whose size every slot write pays for.
const MaxSlotsPerShard = 1000

// Named periods.
const (
	Minute = time.Minute
	Hour   = time.Hour
	Day    = 24 * time.Hour
)

// ParsePeriod reads a window's named period: minute, hour or day. A
// gauge's, concurrent (PeriodConcurrent), is not a window's: callers tell
// it apart first.
func ParsePeriod(name string) (time.Duration, error) {
	switch name {
	case "minute":
		return Minute, nil
	case "hour":
		return Hour, nil
	case "day":
		return Day, nil
	}
	return 0, fmt.Errorf("unknown period %q (want minute, hour, day, concurrent or period_seconds)", name)
}

// PeriodName is the inverse of ParsePeriod; other lengths are written as
// their number of seconds.
func PeriodName(p time.Duration) string {
	switch p {
	case Minute:
		return "minute"
	case Hour:
		return "hour"
	case Day:
		return "day"
	}
	return strconv.FormatInt(int64(p/time.Second), 10) + "s"
}

// Source says where a rule came from. Config rules are read-only through the
// admin API.
type Source uint8

const (
	SourceConfig Source = iota + 1
	SourceManual
)

func (s Source) String() string {
	switch s {
	case SourceConfig:
		return "config"
	case SourceManual:
		return "manual"
	}
	return ""
}

// Rule is one limit definition: a subject in a scope, and its Limit
// (a window, a gauge, a bucket or a budget, each with its own
// parameters), with what applies to every kind of limit: priority,
// shadowing, shards, ramps and fair shares.
//
// A rule has one shared counter per dimension for its whole subject. With
// PerChild on a user-path rule, each direct child of the path gets its own
// counters instead and the path itself does not match.
type Rule struct {
	Scope   Scope
	Subject string // as written when created; matching ignores case
	// Limit is what the rule limits and how: Window, Gauge, Bucket or
	// Budget. Only a rule's identity (ParseRuleID) may leave its limits
	// zero; nil is no rule at all (Problems reports it).
	Limit Limit

	// Priority: among the matching rules of one scope, only those of the
	// highest priority apply, so a specific grant can lift a general cap;
	// Always rules apply whatever the priority. Budgets always apply.
	Priority int
	Always   bool
	// Shadow rules are evaluated and counted but never refuse: a request
	// they would have refused is admitted, and the decision says so.
	Shadow bool
	// Ramp, on a provider or model window, grows the limit from a start;
	// the window's limits are where it ends (see Ramped).
	Ramp *Ramp
	// FairShare shares the rule's limit among its members by weight, with
	// borrowing (see fair.go).
	FairShare *FairShare

	PerChild bool
	// Shards splits each counter of a window or a gauge over this many
	// items so that a subject every request charges is not one hot item.
	// The limit holds exactly (the shares add up to it); a request can be
	// refused while other shards still have room, by at most Shards-1
	// times the request's size. 0 or 1 means one item.
	Shards int
	// ShardHistory lists the rule's recent shard layouts as the
	// configuration store recorded them for every instance alike (see
	// layout.go), oldest first, each with the instant from which it counts
	// (none for the first). Empty when Shards never changed; otherwise its
	// last entry is the layout Shards names.
	ShardHistory []ShardLayout

	Source Source
	// Generation names the life of the rule's counters. Resetting or
	// re-creating a rule starts a new generation, so counters restart
	// without deleting anything (old items age out by TTL).
	Generation string
}

// Key identifies a rule: scope, subject (case folded) and period. Editing
// any of those moves the rule to a new key; editing only limits keeps it.
// A window's period is its seconds, whether it slides or is fixed; a
// gauge's "c"; a bucket's "b" ("bt" counting tokens); a budget's "$" and
// its calendar period: no two kinds share a key on one subject.
func (r Rule) Key() RuleKey { return MakeRuleKey(r.Scope, r.Subject, r.Limit) }

// RuleKey identifies a rule; see Rule.Key.
type RuleKey string

// MakeRuleKey builds the key of the rule with the given identity: a
// scope, a subject and the kind and period of its limit (whose limits it
// ignores).
func MakeRuleKey(scope Scope, subject string, limit Limit) RuleKey {
	period := ""
	if limit != nil {
		period = limit.keyPeriod()
	}
	return RuleKey(scope.String() + ":" + strings.ToLower(subject) + ":" + period)
}

// PeriodName names the rule's period as config writes it: minute, hour,
// day or a number of seconds for a window, concurrent for a gauge,
// "bucket", or a budget's calendar period.
func (r Rule) PeriodName() string {
	if r.Limit == nil {
		return ""
	}
	return r.Limit.periodName()
}

// Validate checks a rule on its own, joining every problem found.
func (r Rule) Validate() error { return errors.Join(r.Problems()...) }

// Problems lists every problem of a rule on its own, each written
// "field: why"; none for a valid rule: its subject's, then its ramp's and
// fair share's, then its limit's (each kind checks its own parameters,
// and the rule's priority and shards as they apply to it).
func (r Rule) Problems() []error {
	errs := r.subjectProblems()
	if r.Ramp != nil {
		errs = append(errs, r.rampProblems()...)
	}
	if r.FairShare != nil {
		errs = append(errs, r.FairShare.problems(r)...)
	}
	if r.Limit == nil {
		return append(errs, errors.New("limit: none (a window, a gauge, a bucket or a budget)"))
	}
	return append(errs, r.Limit.problems(&r)...)
}

// subjectProblems checks the subject for the rule's scope, and per_child.
func (r Rule) subjectProblems() []error {
	switch r.Scope {
	case ScopeUserPath:
		if _, err := ParseUserPath(r.Subject); err != nil {
			return []error{fmt.Errorf("user_path: %w", err)}
		}
		return nil
	case ScopeProvider, ScopeModel:
		return r.upstreamProblems()
	case ScopeTag:
		return r.tagProblems()
	case ScopeKey:
		return r.keyProblems()
	}
	return []error{fmt.Errorf("scope: unknown scope %d", r.Scope)}
}

// upstreamProblems checks a provider's or a model's subject: one name,
// never per child.
func (r Rule) upstreamProblems() []error {
	var errs []error
	if strings.TrimSpace(r.Subject) == "" {
		errs = append(errs, fmt.Errorf("%s: subject is empty", r.Scope))
	} else if strings.ContainsAny(r.Subject, " \t\n") {
		errs = append(errs, fmt.Errorf("%s: subject %q contains white space", r.Scope, r.Subject))
	}
	if r.PerChild {
		errs = append(errs, fmt.Errorf("per_child: only user_path rules can be per child, not %s rules", r.Scope))
	}
	if r.Scope == ScopeModel && (strings.HasPrefix(r.Subject, "/") || strings.HasSuffix(r.Subject, "/")) {
		errs = append(errs, fmt.Errorf("model: subject %q starts or ends with '/' (want model or provider/model)", r.Subject))
	}
	return errs
}

// tagProblems checks a tag's subject: "k=v" for one value, "k=*" with
// per_child for each value, "k" for all of them together.
func (r Rule) tagProblems() []error {
	var errs []error
	name, value, isValue := strings.Cut(r.Subject, "=")
	if err := checkTagPart("tag", name); err != nil {
		errs = append(errs, err)
	}
	switch {
	case value == EachValue:
		if !r.PerChild {
			errs = append(errs, fmt.Errorf("value: %q counts each value of %s apart; set per_child", r.Subject, name))
		}
	case isValue:
		if err := checkTagPart("value", value); err != nil {
			errs = append(errs, err)
		}
		if r.PerChild {
			errs = append(errs, errors.New("value: a rule on one tag value cannot also count each value"))
		}
	case r.PerChild:
		errs = append(errs, fmt.Errorf("value: count each value of %s with the subject %s=*", name, name))
	}
	return errs
}

// keyProblems checks a key's subject: one key's id, or "*" with per_child
// for each key.
func (r Rule) keyProblems() []error {
	switch {
	case r.Subject == EachKey:
		if !r.PerChild {
			return []error{errors.New("key: \"*\" names every key; count each key with key: each")}
		}
	case r.PerChild:
		return []error{fmt.Errorf("key: %q is one key, it cannot be counted per key", r.Subject)}
	case r.Subject == "" || len(r.Subject) > 64 || strings.ContainsAny(r.Subject, " \t\n,="):
		return []error{fmt.Errorf("key: %q is not a key id", r.Subject)}
	}
	return nil
}

// checkTagPart checks a tag's name or value: 1 to 64 letters, digits or
// "-_.:/".
func checkTagPart(field, s string) error {
	if s == "" || len(s) > MaxTagLen {
		return fmt.Errorf("%s: %q is not 1 to %d characters", field, s, MaxTagLen)
	}
	for i := 0; i < len(s); i++ {
		if !tagByte(s[i]) {
			return fmt.Errorf("%s: %q may hold letters, digits and - _ . : / only", field, s)
		}
	}
	return nil
}

// Describe names the rule for messages and headers, in the rule's own
// spelling: "/team/alpha minute", "provider openai concurrent".
func (r Rule) Describe() string {
	if r.Scope == ScopeUserPath {
		return r.Subject + " " + r.PeriodName()
	}
	return r.Scope.String() + " " + r.Subject + " " + r.PeriodName()
}
