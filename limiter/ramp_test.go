package limiter

import (
	"strings"
	"testing"
	"time"
)

// A ramp steps up once per interval while healthy, holds through an
// unhealthy interval, and stops at its maximum; the rule's limits follow.
func TestRampOverSimulatedTime(t *testing.T) {
	r := Ramp{Start: 10, Step: 10, Every: 5 * time.Minute, Max: 35}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s := r.Next(RampState{}, t0, true)
	steps := []struct {
		at      time.Duration
		healthy bool
		want    int64
	}{
		{0, true, 10},
		{4*time.Minute + 59*time.Second, true, 10}, // not yet
		{5 * time.Minute, true, 20},
		{9 * time.Minute, true, 20},
		{10 * time.Minute, false, 20}, // 429s in the interval: hold, and the interval restarts
		{14 * time.Minute, true, 20},
		{15 * time.Minute, true, 30}, // five minutes after the hold
		{20 * time.Minute, true, 35}, // capped at max
		{60 * time.Minute, true, 35},
	}
	if s.Level != 10 || !s.At.Equal(t0) {
		t.Fatalf("start: %+v", s)
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		s = r.Next(s, now, st.healthy)
		if s.Level != st.want {
			t.Fatalf("at %v (healthy %v): level %d, want %d", st.at, st.healthy, s.Level, st.want)
		}
	}
	if r.Due(s, t0.Add(time.Hour)) {
		t.Fatal("a ramp at its maximum is never due")
	}

	rule := Rule{Scope: ScopeProvider, Subject: "openai", Limit: Window{Period: Minute, MaxRequests: 600, MaxTokens: 60000},
		Ramp: &Ramp{Start: 60, Step: 60, Every: time.Minute, Max: 600}}
	if err := rule.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := rule.Ramped(60).Limit.(Window); got.MaxRequests != 60 || got.MaxTokens != 6000 || got.Period != Minute {
		t.Fatalf("ramped to 60: %d requests, %d tokens", got.MaxRequests, got.MaxTokens)
	}
	if got := rule.Ramped(600); got.Limit != rule.Limit {
		t.Fatalf("at its max the rule is itself: %+v", got)
	}
	if g := (Rule{Scope: ScopeProvider, Subject: "openai", Limit: Gauge{MaxInFlight: 9}, Ramp: rule.Ramp}); g.Ramped(60).Limit != g.Limit ||
		!strings.Contains(g.Validate().Error(), "ramp: only request and token windows ramp") {
		t.Fatalf("a gauge ramped: %+v, %v", g.Ramped(60), g.Validate())
	}
	bad := Rule{Scope: ScopeUserPath, Subject: "/x", Limit: Window{Period: Minute, MaxRequests: 9}, Ramp: &Ramp{Start: 0, Step: 0, Every: 0, Max: 7}}
	if n := len(bad.Problems()); n < 5 {
		t.Fatalf("a bad ramp: %d problems, %v", n, bad.Problems())
	}
}

// mulDivCeil is exact at the edges of int64: past 2³¹ it does not round
// through floats.
func TestMulDivCeilExact(t *testing.T) {
	for _, c := range []struct{ a, b, c, want int64 }{
		{3, 5, 4, 4},
		{1<<31 + 1, 3, 7, (3*(1<<31+1) + 6) / 7},
		{MaxAmount, MaxAmount - 1, MaxAmount, MaxAmount - 1},
		{MaxAmount, 3, MaxAmount, 3},
		{1<<53 + 1, 1, 1, 1<<53 + 1}, // a float64 would round this to 2^53
		{1 << 62, 4, 2, 1<<63 - 1},   // does not fit: saturates
		{0, 5, 3, 0},
	} {
		if got := mulDivCeil(c.a, c.b, c.c); got != c.want {
			t.Errorf("mulDivCeil(%d, %d, %d) = %d, want %d", c.a, c.b, c.c, got, c.want)
		}
	}
}
