package limiter

import (
	"testing"
	"time"
)

func TestPauseMatching(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	req := Subject{UserPath: "/team/alpha/app", Provider: "openai", Model: "gpt-4o", Key: "key_1", Tags: []Tag{{"env", "prod"}}}
	for _, c := range []struct {
		p    Pause
		want bool
	}{
		{Pause{Scope: ScopeUserPath, Subject: "/team/alpha"}, true},
		{Pause{Scope: ScopeUserPath, Subject: "/Team"}, true},
		{Pause{Scope: ScopeUserPath, Subject: "/"}, true},
		{Pause{Scope: ScopeUserPath, Subject: "/team/alp"}, false},
		{Pause{Scope: ScopeProvider, Subject: "OpenAI"}, true},
		{Pause{Scope: ScopeProvider, Subject: "anthropic"}, false},
		{Pause{Scope: ScopeModel, Subject: "openai/gpt-4o"}, true},
		{Pause{Scope: ScopeModel, Subject: "gpt-4o"}, true},
		{Pause{Scope: ScopeModel, Subject: "azure/gpt-4o"}, false},
		{Pause{Scope: ScopeTag, Subject: "env=prod"}, true},
		{Pause{Scope: ScopeTag, Subject: "env"}, true},
		{Pause{Scope: ScopeTag, Subject: "env=*"}, true},
		{Pause{Scope: ScopeTag, Subject: "env=dev"}, false},
		{Pause{Scope: ScopeKey, Subject: "key_1"}, true},
		{Pause{Scope: ScopeKey, Subject: "*"}, true},
		{Pause{Scope: ScopeKey, Subject: "key_2"}, false},
	} {
		if got := c.p.Matches(req); got != c.want {
			t.Errorf("%s matches %+v: %v, want %v", c.p.ID(), req, got, c.want)
		}
	}
	if (Pause{Scope: ScopeKey, Subject: "*"}).Matches(Subject{UserPath: "/"}) {
		t.Error("a pause of every managed key matched a request with none")
	}
	until := now.Add(time.Minute)
	ps := []Pause{
		{Scope: ScopeProvider, Subject: "openai", Reason: "incident"},
		{Scope: ScopeUserPath, Subject: "/team", Until: until, Reason: "runaway job"},
	}
	if p, ok := Paused(ps, now, req); !ok || p.Scope != ScopeUserPath {
		t.Fatalf("the consumer's pause comes first: %+v %v", p, ok)
	}
	if p, ok := Paused(ps, until, req); !ok || p.Scope != ScopeProvider {
		t.Fatalf("at its Until a pause no longer holds: %+v %v", p, ok)
	}
	if _, ok := Paused(ps, until, Subject{UserPath: "/other", Provider: "anthropic", Model: "claude"}); ok {
		t.Fatal("an unrelated request was paused")
	}
	for _, bad := range []Pause{{Scope: ScopeUserPath, Subject: "team"}, {Subject: "/x"}, {Scope: ScopeTag, Subject: "bad tag"}, {Scope: ScopeProvider}} {
		if len(bad.Problems()) == 0 {
			t.Errorf("%+v accepted", bad)
		}
	}
}
