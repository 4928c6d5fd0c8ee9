package limiter

import (
	"testing"
	"time"
)

// Every kind of rule has one ID, which reads back to its key.
func TestRuleIDsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		rule Rule
		id   string
	}{
		{Rule{Scope: ScopeUserPath, Subject: "/Team/Alpha", Limit: Window{Period: Minute}}, "user_path:/Team/Alpha:minute"},
		{Rule{Scope: ScopeUserPath, Subject: "/customers", Limit: Window{Period: Hour}, PerChild: true}, "user_path:/customers/*:hour"},
		{Rule{Scope: ScopeUserPath, Subject: "/", Limit: Window{Period: Day}, PerChild: true}, "user_path:/*:day"},
		{Rule{Scope: ScopeUserPath, Subject: "/", Limit: Gauge{}}, "user_path:/:concurrent"},
		{Rule{Scope: ScopeProvider, Subject: "openai", Limit: Window{Period: 300 * time.Second}}, "provider:openai:300s"},
		{Rule{Scope: ScopeModel, Subject: "openai/gpt-4o", Limit: Gauge{}}, "model:openai/gpt-4o:concurrent"},
		{Rule{Scope: ScopeModel, Subject: "or/meta:free", Limit: Window{Period: Minute}}, "model:or/meta:free:minute"},
		{Rule{Scope: ScopeTag, Subject: "feature=*", Limit: Window{Period: Minute}, PerChild: true}, "tag:feature=*:minute"},
		{Rule{Scope: ScopeKey, Subject: "*", Limit: Bucket{Capacity: 5, RefillPerSecond: 1}, PerChild: true}, "key:*:bucket"},
		{Rule{Scope: ScopeKey, Subject: "key_1", Limit: Bucket{Capacity: 5, RefillPerSecond: 1, Tokens: true}}, "key:key_1:token_bucket"},
		{Rule{Scope: ScopeUserPath, Subject: "/team", Limit: Budget{MaxCost: 5, Calendar: CalendarDay}}, "budget:user_path:/team:day"},
		{Rule{Scope: ScopeTag, Subject: "env=prod", Limit: Budget{MaxCost: 5, Calendar: CalendarMonth}}, "budget:tag:env=prod:month"},
	} {
		if got := c.rule.ID(); got != c.id {
			t.Errorf("ID of %+v = %q, want %q", c.rule, got, c.id)
		}
		r, err := ParseRuleID(c.id)
		if err != nil || r.Key() != c.rule.Key() || r.PerChild != c.rule.PerChild || r.ID() != c.id {
			t.Errorf("ParseRuleID(%q) = %+v, %v; want the identity of %+v", c.id, r, err, c.rule)
		}
	}
	if r, err := ParseRuleID("user_path:/team:60"); err != nil || r.Key() != MakeRuleKey(ScopeUserPath, "/team", Window{Period: Minute}) {
		t.Errorf("a period in seconds without s: %+v %v", r, err)
	}
	for _, bad := range []string{"", "user_path", "user_path:/team", "planet:/x:minute", "user_path::minute",
		"user_path:/team:fortnight", "budget:user_path:/team:minute", "user_path:/team:0s", "user_path:/team:-5"} {
		if _, err := ParseRuleID(bad); err == nil {
			t.Errorf("ParseRuleID(%q) accepted", bad)
		}
	}
}

// Each kind's key is what it was when the period told the kinds apart:
// counters are named by it, so the data already stored is read the same.
// A fixed and a sliding window of one period share a key (editing how a
// window counts keeps its counters), and the limits are no part of it.
func TestRuleKeysOfEachKind(t *testing.T) {
	for _, c := range []struct {
		limit Limit
		key   RuleKey
	}{
		{Window{Period: Minute, MaxRequests: 5}, "user_path:/team:60"},
		{Window{Period: Minute, Fixed: true, MaxTokens: 9}, "user_path:/team:60"},
		{Window{Period: 300 * time.Second}, "user_path:/team:300"},
		{Gauge{MaxInFlight: 3}, "user_path:/team:c"},
		{Bucket{Capacity: 5, RefillPerSecond: 1}, "user_path:/team:b"},
		{Bucket{Tokens: true, Capacity: 5, RefillPerSecond: 1}, "user_path:/team:bt"},
		{Budget{MaxCost: 1, Calendar: CalendarDay}, "user_path:/team:$day"},
		{Budget{Calendar: CalendarMonth}, "user_path:/team:$month"},
	} {
		r := Rule{Scope: ScopeUserPath, Subject: "/Team", Limit: c.limit}
		if got := r.Key(); got != c.key {
			t.Errorf("key of %+v = %q, want %q", c.limit, got, c.key)
		}
	}
	if k := (Rule{Scope: ScopeUserPath, Subject: "/team"}).Key(); k != "user_path:/team:" {
		t.Errorf("a rule with no limit: key %q", k)
	}
}
