package limiter_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zones without the system's database

	"github.com/tollgate/tollgate/limiter"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// Calendar periods over fixed instants: month ends in UTC and in Berlin,
// the DST changes, a leap day, week boundaries, hours in a half-hour zone.
func TestCalendarBounds(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	kolkata := mustLoad(t, "Asia/Kolkata")
	utc := time.UTC
	at := func(loc *time.Location, y int, m time.Month, d, h, min, s, ns int) time.Time {
		return time.Date(y, m, d, h, min, s, ns, loc)
	}
	for _, tc := range []struct {
		name       string
		cal        limiter.Calendar
		loc        *time.Location
		now        time.Time
		start, end time.Time
	}{
		{"last nanosecond of January, UTC", limiter.CalendarMonth, utc, at(utc, 2026, 1, 31, 23, 59, 59, 999999999),
			at(utc, 2026, 1, 1, 0, 0, 0, 0), at(utc, 2026, 2, 1, 0, 0, 0, 0)},
		{"first instant of February, UTC", limiter.CalendarMonth, utc, at(utc, 2026, 2, 1, 0, 0, 0, 0),
			at(utc, 2026, 2, 1, 0, 0, 0, 0), at(utc, 2026, 3, 1, 0, 0, 0, 0)},
		{"last second of January in Berlin", limiter.CalendarMonth, berlin,
			at(berlin, 2026, 1, 31, 23, 59, 59, 0), at(berlin, 2026, 1, 1, 0, 0, 0, 0), at(berlin, 2026, 2, 1, 0, 0, 0, 0)},
		{"UTC 23:30 on Jan 31 is February in Berlin", limiter.CalendarMonth, berlin,
			at(utc, 2026, 1, 31, 23, 30, 0, 0), at(berlin, 2026, 2, 1, 0, 0, 0, 0), at(berlin, 2026, 3, 1, 0, 0, 0, 0)},
		{"March in Berlin has 31 days less one hour", limiter.CalendarMonth, berlin,
			at(berlin, 2026, 3, 15, 12, 0, 0, 0), at(berlin, 2026, 3, 1, 0, 0, 0, 0), at(berlin, 2026, 4, 1, 0, 0, 0, 0)},
		{"spring-forward day in Berlin is 23 hours", limiter.CalendarDay, berlin,
			at(berlin, 2026, 3, 29, 12, 0, 0, 0), at(berlin, 2026, 3, 29, 0, 0, 0, 0), at(berlin, 2026, 3, 30, 0, 0, 0, 0)},
		{"fall-back day in Berlin is 25 hours", limiter.CalendarDay, berlin,
			at(berlin, 2026, 10, 25, 12, 0, 0, 0), at(berlin, 2026, 10, 25, 0, 0, 0, 0), at(berlin, 2026, 10, 26, 0, 0, 0, 0)},
		{"the repeated hour 02:00 CEST", limiter.CalendarHour, berlin,
			time.Date(2026, 10, 25, 0, 30, 0, 0, utc), time.Date(2026, 10, 25, 0, 0, 0, 0, utc), time.Date(2026, 10, 25, 1, 0, 0, 0, utc)},
		{"the repeated hour 02:00 CET", limiter.CalendarHour, berlin,
			time.Date(2026, 10, 25, 1, 30, 0, 0, utc), time.Date(2026, 10, 25, 1, 0, 0, 0, utc), time.Date(2026, 10, 25, 2, 0, 0, 0, utc)},
		{"leap day", limiter.CalendarDay, utc, at(utc, 2028, 2, 29, 23, 59, 59, 0),
			at(utc, 2028, 2, 29, 0, 0, 0, 0), at(utc, 2028, 3, 1, 0, 0, 0, 0)},
		{"February of a leap year", limiter.CalendarMonth, utc, at(utc, 2028, 2, 29, 0, 0, 0, 0),
			at(utc, 2028, 2, 1, 0, 0, 0, 0), at(utc, 2028, 3, 1, 0, 0, 0, 0)},
		{"Sunday night is the week that began Monday", limiter.CalendarWeek, utc, at(utc, 2026, 3, 8, 23, 59, 59, 0),
			at(utc, 2026, 3, 2, 0, 0, 0, 0), at(utc, 2026, 3, 9, 0, 0, 0, 0)},
		{"Monday midnight starts a week", limiter.CalendarWeek, utc, at(utc, 2026, 3, 9, 0, 0, 0, 0),
			at(utc, 2026, 3, 9, 0, 0, 0, 0), at(utc, 2026, 3, 16, 0, 0, 0, 0)},
		{"a week across a year end", limiter.CalendarWeek, berlin, at(berlin, 2027, 1, 1, 10, 0, 0, 0),
			at(berlin, 2026, 12, 28, 0, 0, 0, 0), at(berlin, 2027, 1, 4, 0, 0, 0, 0)},
		{"a week across the spring-forward night", limiter.CalendarWeek, berlin, at(berlin, 2026, 3, 29, 23, 0, 0, 0),
			at(berlin, 2026, 3, 23, 0, 0, 0, 0), at(berlin, 2026, 3, 30, 0, 0, 0, 0)},
		{"hours in a half-hour zone", limiter.CalendarHour, kolkata, at(kolkata, 2026, 5, 1, 10, 59, 59, 0),
			at(kolkata, 2026, 5, 1, 10, 0, 0, 0), at(kolkata, 2026, 5, 1, 11, 0, 0, 0)},
	} {
		start, end := tc.cal.Bounds(tc.now, tc.loc)
		if !start.Equal(tc.start) || !end.Equal(tc.end) {
			t.Errorf("%s: %s in %s = [%s, %s), want [%s, %s)", tc.name, tc.cal, tc.loc, start, end, tc.start, tc.end)
		}
		if tc.now.Before(start) || !tc.now.Before(end) {
			t.Errorf("%s: now %s outside its period", tc.name, tc.now)
		}
	}
	if d := time.Date(2026, 3, 30, 0, 0, 0, 0, berlin).Sub(time.Date(2026, 3, 29, 0, 0, 0, 0, berlin)); d != 23*time.Hour {
		t.Fatalf("spring-forward day lasts %s", d)
	}
}

// A budget's refusal waits until its period ends, in its own zone, and
// says so in dollars.
func TestBudgetRefusalWaitsForThePeriod(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	budget := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Budget{MaxCost: 5_000_000, Calendar: limiter.CalendarMonth, Location: berlin}}
	l := newLimiter(t, budget)
	price := limiter.Price{Input: 1_000_000, Output: 2_000_000}
	// 23:00 UTC on 31 January is midnight in Berlin: a new month there.
	now := time.Date(2026, 1, 31, 22, 0, 0, 0, time.UTC) // 23:00 in Berlin
	r := request("/team/app", "openai", "gpt-4o")
	r.InputTokens, r.OutputTokens, r.Price = 1_000_000, 2_000_000, price // $1 + $4
	if d := admit(t, l, now, r); !d.Allowed || d.Budget.Remaining != 0 || !d.Budget.Reset.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, berlin)) {
		t.Fatalf("a request costing the whole budget: %+v", d)
	}
	r2 := request("/team/app", "openai", "gpt-4o")
	r2.InputTokens, r2.Price = 1, price
	// Reserved, not spent: back when the reservation settles.
	if d := admit(t, l, now, r2); d.Allowed || !d.Refused.ReservedOnly || d.Refused.RetryAfter != limiter.DefaultSettleWait {
		t.Fatalf("refusal %+v, want a wait for the reservation to settle", d.Refused)
	}
	// Spent: back when the period ends.
	l = newLimiter(t, budget) // without the reservation
	if _, err := l.Bill(context.Background(), now, "spent", r.Subject, limiter.Usage{InputTokens: 5_000_000}, price); err != nil {
		t.Fatal(err)
	}
	d := admit(t, l, now, r2)
	if d.Allowed || !d.Refused.IsBudget() || d.Refused.ReservedOnly || d.Refused.RetryAfter != time.Hour {
		t.Fatalf("refusal %+v, want a budget refusal for an hour", d.Refused)
	}
	if msg := d.Refused.Message(); !strings.HasPrefix(msg, "budget exhausted for /team: the monthly budget of $5.00 has $5.00 spent; this request would reserve $") {
		t.Fatalf("message %q", msg)
	}
	if d := admit(t, l, now.Add(time.Hour), r2); !d.Allowed {
		t.Fatal("the new month in Berlin did not start empty")
	}
	big := request("/team/app", "openai", "gpt-4o")
	big.InputTokens, big.OutputTokens, big.Price = 3_000_000, 2_000_000, price
	if d := admit(t, l, now.Add(2*time.Hour), big); d.Allowed || d.Refused.Retryable ||
		d.Refused.Message() != "request costing $7.00 exceeds the monthly budget of $5.00 for /team" {
		t.Fatalf("a request larger than the budget: %+v", d.Refused)
	}
}

// Costs are exact integers, rounded up, and bounded at the edges of int64.
func TestCost(t *testing.T) {
	p := limiter.Price{Input: 2_500_000, Output: 10_000_000, CachedInput: 1_250_000}
	for _, tc := range []struct {
		u    limiter.Usage
		want int64
	}{
		{limiter.Usage{}, 0},
		{limiter.Usage{InputTokens: 1}, 3}, // 2.5 µ$, rounded up
		{limiter.Usage{InputTokens: 1_000_000}, 2_500_000},
		{limiter.Usage{InputTokens: 1000, OutputTokens: 500, CachedInputTokens: 2000}, 2500 + 5000 + 2500},
		{limiter.Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, limiter.MaxAmount},
		{limiter.Usage{InputTokens: -5}, 0},
	} {
		if got := p.Cost(tc.u); got != tc.want {
			t.Errorf("Cost(%+v) = %d, want %d", tc.u, got, tc.want)
		}
	}
	huge := limiter.Price{Input: math.MaxInt64, Output: math.MaxInt64}
	if got := huge.Cost(limiter.Usage{InputTokens: limiter.MaxAmount, OutputTokens: limiter.MaxAmount}); got != limiter.MaxAmount {
		t.Fatalf("huge cost %d", got)
	}
	for micros, want := range map[int64]string{0: "0.00", 5_000_000: "5.00", 1234: "0.001234", 10_500_000: "10.50", -1: "-0.000001"} {
		if got := limiter.FormatUSD(micros); got != want {
			t.Errorf("FormatUSD(%d) = %q, want %q", micros, got, want)
		}
	}
}

// A catch-all rule of 10 a minute and a priority 1 rule of 100 on /vip:
// /vip gets 100, everyone else 10; an always rule still applies to /vip.
func TestPriorityAndAlways(t *testing.T) {
	catchAll := userRule("/", limiter.Minute, 10, 0)
	vip := userRule("/vip", limiter.Minute, 100, 0)
	vip.Priority = 1
	count := func(l *limiter.Limiter, path string) int {
		n := 0
		for range 200 {
			if admit(t, l, t0, request(path, "openai", "gpt-4o")).Allowed {
				n++
			}
		}
		return n
	}
	l := newLimiter(t, catchAll, vip)
	if n := count(l, "/vip/app"); n != 100 {
		t.Fatalf("/vip admitted %d, want 100", n)
	}
	if n := count(l, "/other"); n != 10 {
		t.Fatalf("/other admitted %d, want 10", n)
	}
	hard := userRule("/", limiter.Hour, 50, 0)
	hard.Always = true
	l = newLimiter(t, catchAll, vip, hard)
	if n := count(l, "/vip/app"); n != 50 {
		t.Fatalf("/vip under an always rule of 50 admitted %d", n)
	}
	// Priority is per scope: a provider rule still applies.
	prov := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 20}}
	l = newLimiter(t, catchAll, vip, prov)
	if n := count(l, "/vip/app"); n != 20 {
		t.Fatalf("/vip under a provider rule of 20 admitted %d", n)
	}
	// Explain names the overridden rule.
	ex, err := l.Explain(context.Background(), t0, request("/vip/x", "openai", "gpt-4o"))
	if err != nil {
		t.Fatal(err)
	}
	var overridden []string
	for _, r := range ex.Rules {
		if r.Overridden {
			overridden = append(overridden, r.Rule.Subject)
		}
	}
	if strings.Join(overridden, ",") != "/" {
		t.Fatalf("overridden %v, want the catch-all", overridden)
	}
}

func tagged(path string, tags string) limiter.Request {
	r := request(path, "openai", "gpt-4o")
	r.Tags, _ = limiter.ParseTags(tags)
	return r
}

// Tags: a value, each value its own counter, or one total counter for the
// tag whatever its value; keys: each key its own, or one key.
func TestTagAndKeyScopes(t *testing.T) {
	each := limiter.Rule{Scope: limiter.ScopeTag, Subject: "feature=*", PerChild: true, Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 2}}
	total := limiter.Rule{Scope: limiter.ScopeTag, Subject: "env", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 3}}
	value := limiter.Rule{Scope: limiter.ScopeTag, Subject: "env=prod", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}}
	eachTotal := limiter.Rule{Scope: limiter.ScopeTag, Subject: "feature", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 100}}
	l := newLimiter(t, each, total, eachTotal)
	for _, f := range []string{"search", "chat"} {
		for i := range 3 {
			d := admit(t, l, t0, tagged("/a", "feature="+f))
			if d.Allowed != (i < 2) {
				t.Fatalf("feature=%s request %d: allowed %v", f, i, d.Allowed)
			}
		}
	}
	n := 0
	for _, v := range []string{"prod", "dev", "staging", "test"} {
		if admit(t, l, t0, tagged("/a", "env="+v)).Allowed {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("env total admitted %d of 4 values, want 3", n)
	}
	l = newLimiter(t, value)
	if !admit(t, l, t0, tagged("/a", "env=PROD")).Allowed || admit(t, l, t0, tagged("/a", "env=prod")).Allowed {
		t.Fatal("env=prod (case ignored) should admit one")
	}
	if !admit(t, l, t0, tagged("/a", "env=dev")).Allowed || !admit(t, l, t0, request("/a", "openai", "gpt-4o")).Allowed {
		t.Fatal("other values and untagged requests are not limited")
	}
	d := admit(t, l, t0, tagged("/a", "env=prod"))
	if d.Refused == nil || d.Refused.Subject() != "env=prod" {
		t.Fatalf("refusal %+v", d.Refused)
	}

	eachKey := limiter.Rule{Scope: limiter.ScopeKey, Subject: limiter.EachKey, PerChild: true, Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}}
	oneKey := limiter.Rule{Scope: limiter.ScopeKey, Subject: "key_b", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 5}}
	l = newLimiter(t, eachKey, oneKey)
	keyed := func(k string) limiter.Request {
		r := request("/a", "openai", "gpt-4o")
		r.Key = k
		return r
	}
	if !admit(t, l, t0, keyed("key_a")).Allowed || !admit(t, l, t0, keyed("key_b")).Allowed {
		t.Fatal("each key has its own counter")
	}
	d = admit(t, l, t0, keyed("key_a"))
	if d.Allowed || d.Refused.Subject() != "key_a" {
		t.Fatalf("second request of key_a: %+v", d.Refused)
	}
	if !admit(t, l, t0, request("/a", "openai", "gpt-4o")).Allowed {
		t.Fatal("a request without a key is not limited by key rules")
	}
}

func TestParseTags(t *testing.T) {
	tags, err := limiter.ParseTags(" team=alpha , env=prod")
	if err != nil || limiter.FormatTags(tags) != "env=prod,team=alpha" {
		t.Fatalf("%v %v", tags, err)
	}
	for _, bad := range []string{"team", "=x", "a=", "a=b,a=c", "a b=c", "a=b=c", strings.Repeat("k", 65) + "=v",
		strings.Repeat("a=b,", 0) + func() string {
			var b strings.Builder
			for i := range 17 {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString("k" + string(rune('a'+i)) + "=v")
			}
			return b.String()
		}()} {
		if _, err := limiter.ParseTags(bad); err == nil {
			t.Errorf("ParseTags(%q) accepted", bad)
		}
	}
	fixed := []limiter.Tag{{Name: "team", Value: "alpha"}}
	client, _ := limiter.ParseTags("team=beta,feature=x")
	merged, err := limiter.MergeTags(fixed, client)
	if err != nil || limiter.FormatTags(merged) != "feature=x,team=alpha" {
		t.Fatalf("a key's own tags win: %v %v", merged, err)
	}
}

// Every problem of the new rule kinds is reported.
func TestPolicyRuleProblems(t *testing.T) {
	for _, tc := range []struct {
		rule limiter.Rule
		want string
	}{
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Budget{MaxCost: 0, Calendar: limiter.CalendarDay}}, "amount_usd"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarNone}}, "period"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Budget{MaxCost: limiter.MaxAmount + 1, Calendar: limiter.CalendarDay}}, "largest budget"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Bucket{Capacity: 0, RefillPerSecond: 1}}, "capacity"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Bucket{Capacity: 5, RefillPerSecond: 0}}, "refill_per_second"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Bucket{Capacity: 5, RefillPerSecond: math.NaN()}}, "refill_per_second"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Bucket{Capacity: 1 << 40, RefillPerSecond: 1}}, "longer than"},
		{limiter.Rule{Scope: limiter.ScopeTag, Subject: "a b", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}}, "tag"},
		{limiter.Rule{Scope: limiter.ScopeTag, Subject: "env=prod", PerChild: true, Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}}, "each value"},
		{limiter.Rule{Scope: limiter.ScopeKey, Subject: "*", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}}, "key: each"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}, Priority: 5000}, "priority"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}, Shards: 4, Shadow: true}, "shadow"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: limiter.Minute, Fixed: true, MaxRequests: 1}, Shards: 4}, "sharded"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarDay}, Shards: 2}, "shards: a budget cannot be sharded"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarDay}, Always: true}, "budgets always apply"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Bucket{Capacity: 5, RefillPerSecond: 1}, Shards: 2}, "shards: a bucket cannot be sharded"},
		{limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Bucket{Capacity: 5, RefillPerSecond: 1}, Priority: -2000}, "priority"},
	} {
		err := tc.rule.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.rule, err, tc.want)
		}
	}
	// A budget has no request limit, a bucket no window limits: a writer
	// that takes them in one form says so (limiter.Misplaced).
	for _, tc := range []struct {
		on   limiter.Limit
		want string
	}{
		{limiter.Budget{}, "amount_usd: a budget limits money only"},
		{limiter.Bucket{}, "capacity: a bucket rule has a capacity and a refill, not window limits"},
	} {
		if err := errors.Join(limiter.Misplaced(limiter.Window{MaxRequests: 3}, tc.on)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("max_requests on %T: %v, want %q", tc.on, err, tc.want)
		}
	}
	// A budget, a bucket and a window on one subject are three rules.
	rs, err := limiter.NewRules([]limiter.Rule{
		{Scope: limiter.ScopeUserPath, Subject: "/t", Limit: limiter.Window{Period: limiter.Day, MaxRequests: 1}},
		{Scope: limiter.ScopeUserPath, Subject: "/t", Limit: limiter.Budget{MaxCost: 1, Calendar: limiter.CalendarDay}},
		{Scope: limiter.ScopeUserPath, Subject: "/t", Limit: limiter.Bucket{Capacity: 1, RefillPerSecond: 1}},
	})
	if err != nil || rs.Len() != 3 {
		t.Fatalf("%v", err)
	}
}

// A sub-nanosecond refill interval rounds up: the bucket never refills
// faster than configured.
func TestBucketIntervalRoundsUp(t *testing.T) {
	if got := (limiter.Bucket{RefillPerSecond: 3}).Interval(); got != 333_333_334 {
		t.Fatalf("interval %d", got)
	}
	if got := (limiter.Bucket{RefillPerSecond: 0.5}).Interval(); got != 2*time.Second {
		t.Fatalf("interval %s", got)
	}
}

func TestParseUSD(t *testing.T) {
	for in, want := range map[string]int64{"5": 5_000_000, "0.01": 10_000, "2.50": 2_500_000, "0.000075": 75, ".5": 500_000, "$12": 12_000_000, "0": 0, "1125899906.842624": limiter.MaxAmount} {
		if got, err := limiter.ParseUSD(in); err != nil || got != want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ".", "-1", "1e3", "0.0000001", "1,5", "abc", "1125899906.842625", "99999999999", "1.2.3", "+5"} {
		if _, err := limiter.ParseUSD(bad); err == nil {
			t.Errorf("ParseUSD(%q) accepted", bad)
		}
	}
}

// Bill charges spent usage to token windows, buckets and budgets exactly
// once, past their limits, and leaves request windows alone.
func TestBillExactlyOnce(t *testing.T) {
	rules := []limiter.Rule{
		userRule("/team", limiter.Day, 5, 1000),
		{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Budget{MaxCost: 1_000_000, Calendar: limiter.CalendarDay}},
		{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Bucket{Tokens: true, Capacity: 100, RefillPerSecond: 1}},
	}
	l := newLimiter(t, rules...)
	s := limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"}
	used := limiter.Usage{InputTokens: 1500, OutputTokens: 500}
	price := limiter.Price{Input: 1_000_000, Output: 2_000_000}
	for i := range 3 {
		applied, err := l.Bill(context.Background(), t0, "batch-1", s, used, price)
		if err != nil || applied != (i == 0) {
			t.Fatalf("bill %d: applied %v, %v", i, applied, err)
		}
	}
	us, err := l.Usage(context.Background(), t0, s)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, u := range us {
		for _, d := range u.Dimensions {
			got[u.Rule.PeriodName()+" "+d.Kind.String()] = d.Used
		}
	}
	// 2000 tokens past a 1000 limit; $0.0025 of the budget; the bucket of
	// 100 is 2000 tokens in debt (full at 100, so it lacks all 100); the
	// request window is untouched.
	if got["day req"] != 0 || got["day tok"] != 2000 || got["day usd"] != 2500 || got["bucket tok"] != 100 {
		t.Fatalf("after billing: %v", got)
	}
	if d := admit(t, l, t0, request("/team/app", "openai", "gpt-4o")); d.Allowed {
		t.Fatal("a window a bill overfilled still admits")
	}
}

func TestCostOfCachedInput(t *testing.T) {
	p := limiter.Price{Input: 2_000_000, Output: 0, CachedInput: 1_000_000}
	openai := limiter.Usage{InputTokens: 1000, CachedInputTokens: 400, CachedInInput: true}
	anthropic := limiter.Usage{InputTokens: 600, CachedInputTokens: 400}
	if a, b := p.Cost(openai), p.Cost(anthropic); a != 1600 || b != 1600 {
		t.Fatalf("cached input counted in or apart: %d and %d, want 1600 both", a, b)
	}
}
