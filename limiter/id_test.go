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
		{Rule{Scope: ScopeUserPath, Subject: "/Team/Alpha", Period: Minute}, "user_path:/Team/Alpha:minute"},
		{Rule{Scope: ScopeUserPath, Subject: "/customers", Period: Hour, PerChild: true}, "user_path:/customers/*:hour"},
		{Rule{Scope: ScopeUserPath, Subject: "/", Period: Day, PerChild: true}, "user_path:/*:day"},
		{Rule{Scope: ScopeUserPath, Subject: "/", Period: Concurrent}, "user_path:/:concurrent"},
		{Rule{Scope: ScopeProvider, Subject: "openai", Period: 300 * time.Second}, "provider:openai:300s"},
		{Rule{Scope: ScopeModel, Subject: "openai/gpt-4o", Period: Concurrent}, "model:openai/gpt-4o:concurrent"},
		{Rule{Scope: ScopeModel, Subject: "or/meta:free", Period: Minute}, "model:or/meta:free:minute"},
		{Rule{Scope: ScopeTag, Subject: "feature=*", Period: Minute, PerChild: true}, "tag:feature=*:minute"},
		{Rule{Scope: ScopeKey, Subject: "*", Bucket: &Bucket{Capacity: 5, RefillPerSecond: 1}, PerChild: true}, "key:*:bucket"},
		{Rule{Scope: ScopeKey, Subject: "key_1", Bucket: &Bucket{Capacity: 5, RefillPerSecond: 1, Tokens: true}}, "key:key_1:token_bucket"},
		{Rule{Scope: ScopeUserPath, Subject: "/team", MaxCost: 5, Calendar: CalendarDay}, "budget:user_path:/team:day"},
		{Rule{Scope: ScopeTag, Subject: "env=prod", MaxCost: 5, Calendar: CalendarMonth}, "budget:tag:env=prod:month"},
	} {
		if got := c.rule.ID(); got != c.id {
			t.Errorf("ID of %+v = %q, want %q", c.rule, got, c.id)
		}
		r, err := ParseRuleID(c.id)
		if err != nil || r.Key() != c.rule.Key() || r.PerChild != c.rule.PerChild || r.ID() != c.id {
			t.Errorf("ParseRuleID(%q) = %+v, %v; want the identity of %+v", c.id, r, err, c.rule)
		}
	}
	if r, err := ParseRuleID("user_path:/team:60"); err != nil || r.Key() != MakeRuleKey(ScopeUserPath, "/team", Minute) {
		t.Errorf("a period in seconds without s: %+v %v", r, err)
	}
	for _, bad := range []string{"", "user_path", "user_path:/team", "planet:/x:minute", "user_path::minute",
		"user_path:/team:fortnight", "budget:user_path:/team:minute", "user_path:/team:0s", "user_path:/team:-5"} {
		if _, err := ParseRuleID(bad); err == nil {
			t.Errorf("ParseRuleID(%q) accepted", bad)
		}
	}
}
