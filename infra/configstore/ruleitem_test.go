package configstore

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/limiter"
)

// Rule items as the versions before limit kinds wrote them (every
// attribute on every rule, a bucket's or a budget's period as it was
// given or derived) load as the rule of their kind, keep their key, and
// are written back attribute for attribute as they were.
func TestRuleItemsOfEveryVersionLoad(t *testing.T) {
	item := func(sk string, attrs map[string]types.AttributeValue) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{
			"pk": sv(pkRule), "sk": sv(sk), "scope": sv("user_path"), "subject": sv("/team"),
			"period": nv(0), "max_requests": nv(0), "max_tokens": nv(0), "max_input_tokens": nv(0), "max_output_tokens": nv(0),
			"per_child": bv(false), "shards": nv(0), "version": nv(3), "created_at": nv(1_700_000_000_000), "updated_at": nv(1_700_000_000_000),
		}
		for k, v := range attrs {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
		want limiter.Limit
		// rewritten is what the item is written back as, when not the
		// item itself.
		rewritten map[string]types.AttributeValue
	}{
		{"sliding window", item("user_path:/team:60", map[string]types.AttributeValue{"period": nv(60), "max_requests": nv(100), "max_tokens": nv(5000)}),
			limiter.Window{Period: time.Minute, MaxRequests: 100, MaxTokens: 5000}, nil},
		{"fixed window", item("user_path:/team:3600", map[string]types.AttributeValue{"period": nv(3600), "max_input_tokens": nv(7), "window": sv("fixed")}),
			limiter.Window{Period: time.Hour, Fixed: true, MaxInputTokens: 7}, nil},
		{"bedrock quota", item("provider:bedrock:60", map[string]types.AttributeValue{"scope": sv("provider"), "subject": sv("bedrock"),
			"period": nv(60), "max_tokens": nv(60000), "quota": sv("bedrock")}),
			limiter.Window{Period: time.Minute, MaxTokens: 60000, Quota: limiter.QuotaBedrock}, nil},
		{"concurrency", item("user_path:/team:c", map[string]types.AttributeValue{"max_requests": nv(4), "shards": nv(2)}),
			limiter.Gauge{MaxInFlight: 4}, nil},
		{"request bucket", item("user_path:/team:b", map[string]types.AttributeValue{"capacity": nv(50), "refill_per_second": nv(2), "bucket_tokens": bv(false)}),
			limiter.Bucket{Capacity: 50, RefillPerSecond: 2}, nil},
		{"token bucket with a derived period", item("user_path:/team:bt", map[string]types.AttributeValue{"period": nv(25),
			"capacity": nv(100), "refill_per_second": &types.AttributeValueMemberN{Value: "4.5"}, "bucket_tokens": bv(true)}),
			limiter.Bucket{Tokens: true, Capacity: 100, RefillPerSecond: 4.5},
			item("user_path:/team:bt", map[string]types.AttributeValue{"capacity": nv(100), "refill_per_second": &types.AttributeValueMemberN{Value: "4.5"}, "bucket_tokens": bv(true)})},
		{"budget", item("user_path:/team:$day", map[string]types.AttributeValue{"max_cost": nv(5_000_000), "calendar": sv("day")}),
			limiter.Budget{MaxCost: 5_000_000, Calendar: limiter.CalendarDay}, nil},
		{"budget with a derived period", item("user_path:/team:$month", map[string]types.AttributeValue{"period": nv(2_681_999), "max_cost": nv(1), "calendar": sv("month")}),
			limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarMonth},
			item("user_path:/team:$month", map[string]types.AttributeValue{"max_cost": nv(1), "calendar": sv("month")})},
	} {
		r, err := decodeRule(tc.item)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.Limit != tc.want || string(r.Key()) != getS(tc.item, "sk") || r.Version != 3 || r.Source != limiter.SourceManual {
			t.Errorf("%s: loaded %+v (key %s), want %+v under %s", tc.name, r.Rule, r.Key(), tc.want, getS(tc.item, "sk"))
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: loaded an invalid rule: %v", tc.name, err)
		}
		want := tc.rewritten
		if want == nil {
			want = tc.item
		}
		if got := ruleItem(r); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: written back as\n%v\nwant\n%v", tc.name, got, want)
		}
	}
}

// An item whose attributes its kind has not is an error, as the rule
// would have been refused by the rule set.
func TestRuleItemOfTwoKindsIsAnError(t *testing.T) {
	for _, tc := range []struct {
		attrs map[string]types.AttributeValue
		want  string
	}{
		{map[string]types.AttributeValue{"period": nv(0), "max_tokens": nv(5)}, "a concurrent rule limits requests in flight"},
		{map[string]types.AttributeValue{"period": nv(0), "max_requests": nv(1), "window": sv("fixed")}, "a concurrent rule has no window"},
		{map[string]types.AttributeValue{"capacity": nv(5), "refill_per_second": nv(1), "max_requests": nv(3)}, "not window limits"},
		{map[string]types.AttributeValue{"max_cost": nv(5), "calendar": sv("day"), "quota": sv("bedrock")}, "quota: bedrock"},
		{map[string]types.AttributeValue{"period": nv(60), "window": sv("tumbling")}, "unknown window"},
	} {
		it := map[string]types.AttributeValue{"pk": sv(pkRule), "sk": sv("x"), "scope": sv("user_path"), "subject": sv("/team")}
		for k, v := range tc.attrs {
			it[k] = v
		}
		if _, err := decodeRule(it); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.attrs, err, tc.want)
		}
	}
}
