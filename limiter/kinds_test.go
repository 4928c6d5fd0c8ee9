package limiter_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Each kind checks its own parameters, and the rule's priority and shards
// as they apply to it; a rule with no limit is reported, not admitted.
func TestEachKindReportsItsProblems(t *testing.T) {
	at := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		limit limiter.Limit
		edit  func(*limiter.Rule)
		want  string
	}{
		{"no limit", nil, nil, "limit: none"},
		{"window of no period", limiter.Window{MaxRequests: 1}, nil, "period_seconds: 0s is not a whole number of seconds ≥ 1"},
		{"window of a negative period", limiter.Window{Period: -time.Second, MaxRequests: 1}, nil, "period: negative period -1s"},
		{"window of a fraction of a second", limiter.Window{Period: 1500 * time.Millisecond, MaxRequests: 1}, nil, "period_seconds: 1.5s"},
		{"window's negative tokens", limiter.Window{Period: limiter.Minute, MaxTokens: -1}, nil, "max_tokens: negative limit -1"},
		{"window's input tokens past the largest", limiter.Window{Period: limiter.Minute, MaxInputTokens: limiter.MaxAmount + 1}, nil, "max_input_tokens: 1125899906842625 is above the largest limit"},
		{"fixed window sharded", limiter.Window{Period: limiter.Minute, Fixed: true, MaxRequests: 8}, func(r *limiter.Rule) { r.Shards = 2 }, "shards: only sliding windows and concurrency rules can be sharded"},
		{"window shards out of range", limiter.Window{Period: limiter.Minute, MaxRequests: 8}, func(r *limiter.Rule) { r.Shards = 65 }, "shards: 65 is outside 0..64"},
		{"window's shard history out of order", limiter.Window{Period: limiter.Minute, MaxRequests: 8}, func(r *limiter.Rule) {
			r.Shards, r.ShardHistory = 2, []limiter.ShardLayout{{Shards: 1, Since: at}, {Shards: 2, Since: at.Add(-time.Hour)}}
		}, "layout history entry 1"},
		{"window of a bad priority", limiter.Window{Period: limiter.Minute, MaxRequests: 1}, func(r *limiter.Rule) { r.Priority = 1001 }, "priority: 1001 is outside -1000..1000"},
		{"bedrock quota without tokens", limiter.Window{Period: limiter.Minute, MaxRequests: 1, Quota: limiter.QuotaBedrock}, nil, "quota: bedrock changes how max_tokens counts"},
		{"gauge of negative slots", limiter.Gauge{MaxInFlight: -1}, nil, "max_requests: negative limit -1"},
		{"gauge past its shards' slots", limiter.Gauge{MaxInFlight: 2001}, func(r *limiter.Rule) { r.Shards = 2 }, "max_requests: 2001 in flight is more than 1000 per shard; set shards to at least 3"},
		{"gauge sharded and shadow", limiter.Gauge{MaxInFlight: 10}, func(r *limiter.Rule) { r.Shards, r.Shadow = 2, true }, "shadow: a sharded rule cannot be a shadow"},
		{"gauge shards out of range", limiter.Gauge{MaxInFlight: 10}, func(r *limiter.Rule) { r.Shards = -1 }, "shards: -1 is outside 0..64"},
		{"bucket of no capacity", limiter.Bucket{RefillPerSecond: 1}, nil, "capacity: 0 is outside 1.."},
		{"bucket of infinite refill", limiter.Bucket{Capacity: 1, RefillPerSecond: math.Inf(1)}, nil, "refill_per_second"},
		{"bucket sharded", limiter.Bucket{Capacity: 1, RefillPerSecond: 1}, func(r *limiter.Rule) { r.Shards = 2 }, "shards: a bucket cannot be sharded"},
		{"budget of no period", limiter.Budget{MaxCost: 1}, nil, "period: a budget's period is hour, day, week or month"},
		{"budget of no amount", limiter.Budget{Calendar: limiter.CalendarDay}, nil, "amount_usd: a budget needs an amount above 0"},
		{"budget with a priority", limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarDay}, func(r *limiter.Rule) { r.Priority = 3 }, "priority: budgets always apply"},
		{"budget ramped", limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarDay}, func(r *limiter.Rule) {
			r.Scope, r.Subject, r.Ramp = limiter.ScopeProvider, "openai", &limiter.Ramp{Start: 1, Step: 1, Every: time.Minute, Max: 1}
		}, "ramp: only request and token windows ramp"},
	} {
		r := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: tc.limit}
		if tc.edit != nil {
			tc.edit(&r)
		}
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if _, err := limiter.NewRules([]limiter.Rule{r}); err == nil {
			t.Errorf("%s: a rule set took it", tc.name)
		}
	}
	// And a valid rule of each kind is valid.
	for _, l := range []limiter.Limit{
		limiter.Window{Period: limiter.Minute, MaxRequests: 1},
		limiter.Window{Period: 300 * time.Second, Fixed: true, MaxTokens: 1},
		limiter.Gauge{MaxInFlight: 1000},
		limiter.Bucket{Tokens: true, Capacity: 100, RefillPerSecond: 10},
		limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarMonth},
	} {
		if err := (limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: l}).Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
}

// What a kind has not is reported where a writer reads every kind's
// fields in one form: a window's fields beside a gauge, a bucket or a
// budget.
func TestMisplacedWindowFields(t *testing.T) {
	all := limiter.Window{Period: limiter.Minute, Fixed: true, MaxRequests: 1, MaxTokens: 2, Quota: limiter.QuotaBedrock}
	for _, tc := range []struct {
		w    limiter.Window
		on   limiter.Limit
		want []string
	}{
		{all, limiter.Gauge{}, []string{
			"max_tokens: a concurrent rule limits requests in flight, not tokens",
			"window: a concurrent rule has no window",
			"quota: bedrock is for token windows, not concurrency rules",
		}},
		{limiter.Window{MaxInputTokens: 1}, limiter.Gauge{}, []string{"max_tokens: a concurrent rule limits requests in flight, not tokens"}},
		{limiter.Window{MaxRequests: 5}, limiter.Gauge{}, nil}, // a gauge's requests in flight
		{all, limiter.Bucket{}, []string{
			"capacity: a bucket rule has a capacity and a refill, not window limits",
			"window: a bucket has no window",
			"quota: bedrock is for token windows, not buckets or budgets",
		}},
		{all, limiter.Budget{}, []string{
			"amount_usd: a budget limits money only; put request and token limits in a rate-limit rule",
			"window: a budget has no window",
			"quota: bedrock is for token windows, not buckets or budgets",
		}},
		{limiter.Window{Period: limiter.Hour}, limiter.Bucket{}, nil}, // the period is the writer's to report
		{all, all, nil},
	} {
		var got []string
		for _, e := range limiter.Misplaced(tc.w, tc.on) {
			got = append(got, e.Error())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%+v on %T:\n got %q\nwant %q", tc.w, tc.on, got, tc.want)
		}
	}
	if err := errors.Join(limiter.Misplaced(limiter.Window{}, limiter.Gauge{})...); err != nil {
		t.Errorf("a gauge written with nothing else: %v", err)
	}
}
