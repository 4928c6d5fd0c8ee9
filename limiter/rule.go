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

// Concurrent is the Period of a rule that limits in-flight requests instead
// of a window.
const Concurrent time.Duration = 0

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

// ParsePeriod reads a named period: minute, hour, day or concurrent.
func ParsePeriod(name string) (time.Duration, error) {
	switch name {
	case "minute":
		return Minute, nil
	case "hour":
		return Hour, nil
	case "day":
		return Day, nil
	case "concurrent":
		return Concurrent, nil
	}
	return 0, fmt.Errorf("unknown period %q (want minute, hour, day, concurrent or period_seconds)", name)
}

// PeriodName is the inverse of ParsePeriod; other lengths are written as
// their number of seconds.
func PeriodName(p time.Duration) string {
	switch p {
	case Concurrent:
		return "concurrent"
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

// Rule is one limit definition: a subject in a scope, a period, and the
// maxima for that period. A zero maximum means no limit on that dimension.
//
// A rule has one shared counter per dimension for its whole subject. With
// PerChild on a user-path rule, each direct child of the path gets its own
// counters instead and the path itself does not match.
type Rule struct {
	Scope   Scope
	Subject string // as written when created; matching ignores case
	// Period is the window length, or Concurrent for an in-flight limit.
	Period time.Duration

	MaxRequests     int64 // requests per window, or in flight for Concurrent
	MaxTokens       int64 // input + output tokens per window
	MaxInputTokens  int64 // input tokens per window
	MaxOutputTokens int64 // output tokens per window

	// Window is how a windowed rule counts: the sliding estimate, or fixed
	// windows.
	Window Window
	// Quota is the arithmetic of the rule's max_tokens window: tollgate's
	// own, or an upstream's (QuotaBedrock). Editing it keeps the counters.
	Quota QuotaArithmetic
	// Bucket, when set, makes the rule a token bucket instead of a window:
	// Period and the Max fields are unused.
	Bucket *Bucket

	// MaxCost makes the rule a budget: micro-dollars per Calendar period
	// in Location (nil: UTC), reserved at admission at the request's price
	// and settled to the actual cost. A budget has no other limit.
	MaxCost  int64
	Calendar Calendar
	Location *time.Location

	// Priority: among the matching rules of one scope, only those of the
	// highest priority apply, so a specific grant can lift a general cap;
	// Always rules apply whatever the priority. Budgets always apply.
	Priority int
	Always   bool
	// Shadow rules are evaluated and counted but never refuse: a request
	// they would have refused is admitted, and the decision says so.
	Shadow bool
	// Ramp, on a provider or model window, grows the limit from a start;
	// the limits above are where it ends (see Ramped).
	Ramp *Ramp
	// FairShare shares the rule's limit among its members by weight, with
	// borrowing (see fair.go).
	FairShare *FairShare

	PerChild bool
	// Shards splits each counter of the rule over this many items so that a
	// subject every request charges is not one hot item. The limit holds
	// exactly (the shares add up to it); a request can be refused while
	// other shards still have room, by at most Shards-1 times the request's
	// size. 0 or 1 means one item.
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
// A bucket's period is "b" ("bt" counting tokens), a budget's "$" and its
// calendar period, so neither shares a key with a window rule on the same
// subject.
func (r Rule) Key() RuleKey {
	switch {
	case r.Bucket != nil && r.Bucket.Tokens:
		return RuleKey(r.Scope.String() + ":" + strings.ToLower(r.Subject) + ":bt")
	case r.Bucket != nil:
		return RuleKey(r.Scope.String() + ":" + strings.ToLower(r.Subject) + ":b")
	case r.IsBudget():
		return MakeBudgetKey(r.Scope, r.Subject, r.Calendar)
	}
	return MakeRuleKey(r.Scope, r.Subject, r.Period)
}

// MakeBudgetKey builds the key of the budget with the given identity.
func MakeBudgetKey(scope Scope, subject string, c Calendar) RuleKey {
	return RuleKey(scope.String() + ":" + strings.ToLower(subject) + ":$" + c.String())
}

// IsBudget reports whether the rule limits money.
func (r Rule) IsBudget() bool { return r.MaxCost > 0 || r.Calendar != CalendarNone }

// PeriodName names the rule's period as config writes it: minute, hour,
// day, concurrent, a number of seconds, a budget's calendar period, or
// "bucket".
func (r Rule) PeriodName() string {
	switch {
	case r.Bucket != nil:
		return "bucket"
	case r.IsBudget():
		return r.Calendar.String()
	}
	return PeriodName(r.Period)
}

// normalized fills in what the limiter derives: a bucket's and a budget's
// Period (the longest its counter can take to empty, for expiries), so
// that Period == Concurrent means a concurrency rule only.
func (r Rule) normalized() Rule {
	switch {
	case r.Bucket != nil:
		r.Period = max(time.Second, (time.Duration(r.Bucket.fill())+time.Second-1)/time.Second*time.Second)
	case r.IsBudget():
		r.Period = r.Calendar.longest()
	}
	return r
}

// RuleKey identifies a rule; see Rule.Key.
type RuleKey string

// MakeRuleKey builds the key of the rule with the given identity.
func MakeRuleKey(scope Scope, subject string, period time.Duration) RuleKey {
	p := "c"
	if period != Concurrent {
		p = strconv.FormatInt(int64(period/time.Second), 10)
	}
	return RuleKey(scope.String() + ":" + strings.ToLower(subject) + ":" + p)
}

// Validate checks a rule on its own, joining every problem found.
func (r Rule) Validate() error { return errors.Join(r.Problems()...) }

// Problems lists every problem of a rule on its own, each written
// "field: why"; none for a valid rule.
func (r Rule) Problems() []error {
	var errs []error
	if r.Ramp != nil {
		errs = append(errs, r.rampProblems()...)
	}
	if r.FairShare != nil {
		errs = append(errs, r.FairShare.problems(r)...)
	}
	errs = append(errs, r.quotaProblems()...)
	switch r.Scope {
	case ScopeUserPath:
		if _, err := ParseUserPath(r.Subject); err != nil {
			errs = append(errs, fmt.Errorf("user_path: %w", err))
		}
	case ScopeProvider, ScopeModel:
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
	case ScopeTag:
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
	case ScopeKey:
		switch {
		case r.Subject == EachKey:
			if !r.PerChild {
				errs = append(errs, errors.New("key: \"*\" names every key; count each key with key: each"))
			}
		case r.PerChild:
			errs = append(errs, fmt.Errorf("key: %q is one key, it cannot be counted per key", r.Subject))
		case r.Subject == "" || len(r.Subject) > 64 || strings.ContainsAny(r.Subject, " \t\n,="):
			errs = append(errs, fmt.Errorf("key: %q is not a key id", r.Subject))
		}
	default:
		errs = append(errs, fmt.Errorf("scope: unknown scope %d", r.Scope))
	}
	switch {
	case r.Bucket != nil:
		errs = append(errs, r.bucketProblems()...)
		return errs
	case r.IsBudget():
		errs = append(errs, r.budgetProblems()...)
		return errs
	}
	if r.Priority < -1000 || r.Priority > 1000 {
		errs = append(errs, fmt.Errorf("priority: %d is outside -1000..1000", r.Priority))
	}
	if r.Window > WindowFixed {
		errs = append(errs, fmt.Errorf("window: unknown window %d", r.Window))
	}
	if r.Shadow && r.Shards > 1 {
		errs = append(errs, errors.New("shadow: a sharded rule cannot be a shadow (a shard's refusal is not the rule's)"))
	}
	if r.Window == WindowFixed && r.Shards > 1 {
		errs = append(errs, errors.New("shards: only sliding windows and concurrency rules can be sharded"))
	}
	if r.Period < 0 {
		errs = append(errs, fmt.Errorf("period: negative period %s", r.Period))
	} else if r.Period != Concurrent && (r.Period < time.Second || r.Period%time.Second != 0) {
		errs = append(errs, fmt.Errorf("period_seconds: %s is not a whole number of seconds ≥ 1", r.Period))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max_requests", r.MaxRequests},
		{"max_tokens", r.MaxTokens},
		{"max_input_tokens", r.MaxInputTokens},
		{"max_output_tokens", r.MaxOutputTokens},
	} {
		switch {
		case f.v < 0:
			errs = append(errs, fmt.Errorf("%s: negative limit %d", f.name, f.v))
		case f.v > MaxAmount:
			errs = append(errs, fmt.Errorf("%s: %d is above the largest limit, %d", f.name, f.v, MaxAmount))
		}
	}
	if r.Period == Concurrent && (r.MaxTokens != 0 || r.MaxInputTokens != 0 || r.MaxOutputTokens != 0) {
		errs = append(errs, errors.New("max_tokens: a concurrent rule limits requests in flight, not tokens"))
	}
	if r.Shards < 0 || r.Shards > 64 {
		errs = append(errs, fmt.Errorf("shards: %d is outside 0..64", r.Shards))
	}
	for i, h := range r.ShardHistory {
		if h.Shards < 0 || h.Shards > 64 || (i > 0 && h.Since.Before(r.ShardHistory[i-1].Since)) {
			errs = append(errs, fmt.Errorf("shards: layout history entry %d (%d from %v) is out of order or range", i, h.Shards, h.Since))
		}
	}
	if len(r.ShardHistory) > maxShardHistory {
		errs = append(errs, fmt.Errorf("shards: %d layouts in the history, at most %d", len(r.ShardHistory), maxShardHistory))
	}
	if r.Period == Concurrent && r.MaxRequests > int64(MaxSlotsPerShard)*int64(max(r.Shards, 1)) {
		errs = append(errs, fmt.Errorf("max_requests: %d in flight is more than %d per shard; set shards to at least %d",
			r.MaxRequests, MaxSlotsPerShard, (r.MaxRequests+MaxSlotsPerShard-1)/MaxSlotsPerShard))
	}
	return errs
}

func (r Rule) bucketProblems() []error {
	errs := r.Bucket.problems()
	if r.Priority < -1000 || r.Priority > 1000 {
		errs = append(errs, fmt.Errorf("priority: %d is outside -1000..1000", r.Priority))
	}
	if r.MaxRequests != 0 || r.MaxTokens != 0 || r.MaxInputTokens != 0 || r.MaxOutputTokens != 0 || r.MaxCost != 0 {
		errs = append(errs, errors.New("capacity: a bucket rule has a capacity and a refill, not window limits"))
	}
	if r.Shards > 1 {
		errs = append(errs, errors.New("shards: a bucket cannot be sharded"))
	}
	if r.Window != WindowSliding {
		errs = append(errs, errors.New("window: a bucket has no window"))
	}
	return errs
}

func (r Rule) budgetProblems() []error {
	var errs []error
	if r.Calendar < CalendarHour || r.Calendar > CalendarMonth {
		errs = append(errs, errors.New("period: a budget's period is hour, day, week or month"))
	}
	switch {
	case r.MaxCost <= 0:
		errs = append(errs, errors.New("amount_usd: a budget needs an amount above 0"))
	case r.MaxCost > MaxAmount:
		errs = append(errs, fmt.Errorf("amount_usd: %s is above the largest budget, %s", FormatUSD(r.MaxCost), FormatUSD(MaxAmount)))
	}
	if r.MaxRequests != 0 || r.MaxTokens != 0 || r.MaxInputTokens != 0 || r.MaxOutputTokens != 0 {
		errs = append(errs, errors.New("amount_usd: a budget limits money only; put request and token limits in a rate-limit rule"))
	}
	if r.Shards > 1 {
		errs = append(errs, errors.New("shards: a budget cannot be sharded"))
	}
	if r.Priority != 0 || r.Always {
		errs = append(errs, errors.New("priority: budgets always apply; they take no priority"))
	}
	return errs
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
