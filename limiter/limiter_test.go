package limiter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
)

var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC) // a minute, hour and day boundary

func newLimiter(t testing.TB, rules ...limiter.Rule) *limiter.Limiter {
	t.Helper()
	rs, err := limiter.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var reqSeq int

func request(path, provider, model string) limiter.Request {
	reqSeq++
	return limiter.Request{
		ID:      fmt.Sprintf("req-%d", reqSeq),
		Subject: limiter.Subject{UserPath: path, Provider: provider, Model: model},
	}
}

func admit(t testing.TB, l *limiter.Limiter, now time.Time, r limiter.Request) limiter.Decision {
	t.Helper()
	d, err := l.Admit(context.Background(), now, r)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func userRule(path string, period time.Duration, maxReq, maxTok int64) limiter.Rule {
	return limiter.Rule{Scope: limiter.ScopeUserPath, Subject: path, Limit: limiter.Window{Period: period, MaxRequests: maxReq, MaxTokens: maxTok}}
}

func TestMatching(t *testing.T) {
	rules := []limiter.Rule{
		userRule("/team", limiter.Minute, 1, 0),
		userRule("/", limiter.Hour, 1000, 0),
		{Scope: limiter.ScopeUserPath, Subject: "/Customers", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}, PerChild: true},
		{Scope: limiter.ScopeProvider, Subject: "OpenAI-EU", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}},
		{Scope: limiter.ScopeModel, Subject: "openai-eu/gpt-4o", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}},
		{Scope: limiter.ScopeModel, Subject: "claude-3", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}},
	}
	tests := []struct {
		name                  string
		path, provider, model string
		// second says whether a second identical request is refused, and by
		// which rule.
		refusedBy string
	}{
		{"path itself", "/team", "", "", "/team"},
		{"below path", "/team/app/x", "", "", "/team"},
		{"case ignored", "/TEAM/App", "", "", "/team"},
		{"sibling prefix is not below", "/team-alpha", "", "", ""},
		{"root covers all", "/elsewhere", "", "", ""},
		{"template path itself does not match", "/customers", "", "", ""},
		{"child matches template", "/customers/alice", "", "", "/Customers/alice"},
		{"grandchild shares the child's counter", "/customers/alice/app", "", "", "/Customers/alice"},
		{"provider rule ignores case", "/x", "openai-eu", "gpt-3.5", "provider OpenAI-EU"},
		{"bare model on any provider", "/y", "anthropic", "Claude-3", "model claude-3"},
		{"qualified model only at its provider", "/z", "other", "gpt-4o", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, rules...)
			first := admit(t, l, t0, request(tc.path, tc.provider, tc.model))
			if !first.Allowed {
				t.Fatalf("first request refused: %s", first.Refused.Message())
			}
			second := admit(t, l, t0, request(tc.path, tc.provider, tc.model))
			switch {
			case tc.refusedBy == "" && !second.Allowed:
				t.Fatalf("second request refused by %s, want admitted", second.Refused.Message())
			case tc.refusedBy != "" && second.Allowed:
				t.Fatalf("second request admitted, want refused by %s", tc.refusedBy)
			case tc.refusedBy != "":
				got := second.Refused.Subject()
				if second.Refused.Scope() != limiter.ScopeUserPath {
					got = second.Refused.Scope().String() + " " + got
				}
				if !strings.EqualFold(got, tc.refusedBy) {
					t.Fatalf("refused by %q, want %q", got, tc.refusedBy)
				}
			}
		})
	}
}

func TestPerChildKeepsSpellingAndSeparatesChildren(t *testing.T) {
	l := newLimiter(t, limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/customers", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 2}, PerChild: true})
	for _, p := range []string{"/customers/alice", "/customers/alice/app"} {
		if d := admit(t, l, t0, request(p, "", "")); !d.Allowed {
			t.Fatalf("%s refused", p)
		}
	}
	d := admit(t, l, t0, request("/customers/ALICE", "", ""))
	if d.Allowed {
		t.Fatal("alice's third request admitted past her own limit of 2")
	}
	if got, want := d.Refused.Message(), "rate limit exceeded for /customers/alice: minute request limit of 2 reached"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if d := admit(t, l, t0, request("/customers/bob", "", "")); !d.Allowed {
		t.Fatal("bob refused: children must not share counters")
	}
}

func TestBoundaryBurst(t *testing.T) {
	// 100/minute. A client sends 100 in the last second of a window and
	// bursts again in the first seconds of the next: the sliding estimate
	// allows only what has decayed, never a second full 100.
	l := newLimiter(t, userRule("/burst", limiter.Minute, 100, 0))
	end := t0.Add(59 * time.Second)
	for i := range 100 {
		if d := admit(t, l, end, request("/burst", "", "")); !d.Allowed {
			t.Fatalf("request %d in window 0 refused", i)
		}
	}
	steps := []struct {
		at       time.Duration // into window 1
		wantMore int           // admitted by a burst of 200 at that instant
	}{
		{0, 0},
		{time.Nanosecond, 0},
		{600 * time.Millisecond, 1}, // prev weighs 99: 1 fits
		{6 * time.Second, 9},        // prev weighs 90: 10 in total by now
		{30 * time.Second, 40},      // prev weighs 50: 50 in total
	}
	total := 0
	for _, st := range steps {
		now := t0.Add(time.Minute + st.at)
		n := 0
		for range 200 {
			if admit(t, l, now, request("/burst", "", "")).Allowed {
				n++
			}
		}
		total += n
		if n != st.wantMore {
			t.Errorf("%v into window 1: %d admitted, want %d", st.at, n, st.wantMore)
		}
	}
	if total > 50 {
		t.Fatalf("%d admitted in the first half of window 1 after a full window 0", total)
	}
}

func TestLastAndFirstNanosecond(t *testing.T) {
	l := newLimiter(t, userRule("/edge", limiter.Minute, 1, 0))
	last := t0.Add(time.Minute - time.Nanosecond)
	if !admit(t, l, last, request("/edge", "", "")).Allowed {
		t.Fatal("the last nanosecond of window 0 refused an empty limit")
	}
	first := t0.Add(time.Minute)
	d := admit(t, l, first, request("/edge", "", ""))
	if d.Allowed {
		t.Fatal("first nanosecond of window 1 admitted: prev still weighs fully")
	}
	// The wait is a whole window: prev=1 must decay to 0.
	if d.Refused.RetryAfter != time.Minute || d.Refused.RetryAfterSeconds() != 60 {
		t.Fatalf("RetryAfter %v, want 1m0s", d.Refused.RetryAfter)
	}
}

func TestClockGoingBackwards(t *testing.T) {
	l := newLimiter(t, userRule("/back", limiter.Minute, 2, 0))
	now := t0.Add(90 * time.Second)
	admit(t, l, now, request("/back", "", ""))
	admit(t, l, now, request("/back", "", ""))
	// An instance whose clock is a window behind sees its own window: the
	// decision is made at the instant it is given, never panics, and the
	// later window's requests do not leak into it.
	if d := admit(t, l, now.Add(-time.Minute), request("/back", "", "")); !d.Allowed {
		t.Fatalf("earlier window refused: %s", d.Refused.Message())
	}
	if d := admit(t, l, now, request("/back", "", "")); d.Allowed {
		t.Fatal("the full window admitted a third request after the clock stepped back and forth")
	}
}

func TestRetryAfterIsExact(t *testing.T) {
	tests := []struct {
		name   string
		rule   limiter.Rule
		fill   []int64 // reservations admitted at t0+offset before the probe
		offset time.Duration
		probe  int64 // the probe's token reservation
	}{
		{"requests within window", userRule("/r", limiter.Minute, 5, 0), []int64{0, 0, 0, 0, 0}, 20 * time.Second, 0},
		{"requests past the boundary", userRule("/r", limiter.Minute, 5, 0), []int64{0, 0, 0, 0, 0}, 59 * time.Second, 0},
		{"hour window", userRule("/r", limiter.Hour, 3, 0), []int64{0, 0, 0}, 10 * time.Minute, 0},
		{"odd period", userRule("/r", 7*time.Second, 2, 0), []int64{0, 0}, 3 * time.Second, 0},
		{"tokens", userRule("/r", limiter.Minute, 0, 1000), []int64{400, 400}, 10 * time.Second, 300},
		{"tokens larger than what is left", userRule("/r", limiter.Minute, 0, 1000), []int64{900}, 40 * time.Second, 800},
		{"tokens a window later", userRule("/r", limiter.Minute, 0, 1000), []int64{990}, 59*time.Second + 500*time.Millisecond, 995},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, tc.rule)
			at := t0.Add(tc.offset)
			for _, tok := range tc.fill {
				r := request("/r", "", "")
				r.InputTokens = tok
				if d := admit(t, l, at, r); !d.Allowed {
					t.Fatalf("fill refused: %s", d.Refused.Message())
				}
			}
			probe := request("/r", "", "")
			probe.InputTokens = tc.probe
			d := admit(t, l, at, probe)
			if d.Allowed {
				t.Fatal("probe admitted; the fill should exhaust the rule")
			}
			ra := time.Duration(d.Refused.RetryAfterSeconds()) * time.Second
			if ra <= 0 {
				t.Fatalf("Retry-After %v", ra)
			}
			// One second early is refused, Retry-After itself admitted. Each
			// probe runs on a copy of the state: a fresh limiter replayed.
			for _, c := range []struct {
				after time.Duration
				want  bool
			}{{ra - time.Second, false}, {ra, true}} {
				l2 := newLimiter(t, tc.rule)
				for _, tok := range tc.fill {
					r := request("/r", "", "")
					r.InputTokens = tok
					admit(t, l2, at, r)
				}
				p := request("/r", "", "")
				p.InputTokens = tc.probe
				if got := admit(t, l2, at.Add(c.after), p).Allowed; got != c.want {
					t.Errorf("retry after %v (Retry-After %v, exact %v): admitted=%v, want %v",
						c.after, ra, d.Refused.RetryAfter, got, c.want)
				}
			}
			// The exact wait itself admits; a nanosecond less does not.
			for _, c := range []struct {
				after time.Duration
				want  bool
			}{{d.Refused.RetryAfter - time.Nanosecond, false}, {d.Refused.RetryAfter, true}} {
				l2 := newLimiter(t, tc.rule)
				for _, tok := range tc.fill {
					r := request("/r", "", "")
					r.InputTokens = tok
					admit(t, l2, at, r)
				}
				p := request("/r", "", "")
				p.InputTokens = tc.probe
				if got := admit(t, l2, at.Add(c.after), p).Allowed; got != c.want {
					t.Errorf("exact retry after %v: admitted=%v, want %v", c.after, got, c.want)
				}
			}
		})
	}
}

func TestRequestLargerThanLimit(t *testing.T) {
	l := newLimiter(t, userRule("/big", limiter.Minute, 0, 1000))
	r := request("/big", "", "")
	r.InputTokens, r.OutputTokens = 900, 200
	d := admit(t, l, t0, r)
	if d.Allowed || d.Refused.Retryable {
		t.Fatalf("a 1100-token request against 1000/minute: %+v, want refused for good", d)
	}
	if got, want := d.Refused.Message(), "request of 1100 tokens exceeds the minute token limit of 1000 for /big"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}

func TestConcurrency(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Gauge{MaxInFlight: 2}})
	d1 := admit(t, l, t0, request("/", "openai", "gpt-4o"))
	d2 := admit(t, l, t0, request("/", "openai", "gpt-4o"))
	if !d1.Allowed || !d2.Allowed || d1.Lease == nil {
		t.Fatal("the first two in-flight requests must be admitted with leases")
	}
	if !d1.Lease.HoldsSlots() {
		t.Fatal("a gauge's lease does not hold its slot")
	}
	var none *limiter.Lease
	reservation := &limiter.Lease{Charges: []limiter.Charge{{Counter: limiter.Counter{Kind: limiter.KindTokens}}}}
	if none.HoldsSlots() || reservation.HoldsSlots() {
		t.Fatal("a nil lease, or one reserving tokens only, holds a slot")
	}
	d3 := admit(t, l, t0, request("/", "openai", "gpt-4o"))
	if d3.Allowed {
		t.Fatal("third in-flight request admitted past 2")
	}
	if d3.Refused.Kind != limiter.KindInFlight || d3.Requests.HasReset || d3.Requests.Remaining != 0 || d3.Requests.Limit != 2 {
		t.Fatalf("concurrency refusal: kind %v requests quota %+v; want limit 2, remaining 0, no reset", d3.Refused.Kind, d3.Requests)
	}
	if got, want := d3.Refused.Message(), "rate limit exceeded for provider openai: concurrent request limit of 2 reached"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if err := l.Complete(ctx, t0, d1.Lease, limiter.Usage{Exact: true}); err != nil {
		t.Fatal(err)
	}
	if d := admit(t, l, t0, request("/", "openai", "gpt-4o")); !d.Allowed {
		t.Fatal("slot not released on Complete")
	}
	// Batch submissions hold no slot.
	batch := request("/", "openai", "gpt-4o")
	batch.ConsumerOnly = true
	if d := admit(t, l, t0, batch); !d.Allowed || d.Lease != nil {
		t.Fatalf("batch submission: allowed=%v lease=%v, want allowed without a lease", d.Allowed, d.Lease)
	}
}

func TestBatchSkipsProviderAndModelRules(t *testing.T) {
	l := newLimiter(t,
		limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 1}},
		userRule("/b", limiter.Minute, 2, 0),
	)
	for i := range 3 {
		r := request("/b", "openai", "gpt-4o")
		r.ConsumerOnly = true
		d := admit(t, l, t0, r)
		if got, want := d.Allowed, i < 2; got != want {
			t.Fatalf("batch %d: admitted=%v, want %v (user-path rule only)", i, got, want)
		}
	}
}

func TestHeadersFromMostRestrictiveRule(t *testing.T) {
	l := newLimiter(t,
		userRule("/", limiter.Minute, 100, 50000),
		userRule("/team", limiter.Day, 5, 0),
	)
	now := t0.Add(18 * time.Second)
	r := request("/team/app", "", "")
	r.InputTokens, r.OutputTokens = 1000, 200
	d := admit(t, l, now, r)
	if !d.Allowed {
		t.Fatal("refused")
	}
	want := limiter.Quota{Limit: 5, Remaining: 4, Reset: 2*limiter.Day - 18*time.Second, HasReset: true}
	if d.Requests != want {
		t.Errorf("requests quota %+v, want %+v (the day rule leaves fewer)", d.Requests, want)
	}
	wantTok := limiter.Quota{Limit: 50000, Remaining: 48800, Reset: 2*time.Minute - 18*time.Second, HasReset: true}
	if d.Tokens != wantTok {
		t.Errorf("tokens quota %+v, want %+v", d.Tokens, wantTok)
	}
}

func TestRefusalNamesBindingRule(t *testing.T) {
	// Both the minute and the day rule are exhausted; the day rule decides
	// when a retry can pass, so it is the one named, with its wait.
	l := newLimiter(t,
		userRule("/t", limiter.Minute, 1, 0),
		userRule("/t", limiter.Day, 1, 0),
	)
	admit(t, l, t0, request("/t", "", ""))
	d := admit(t, l, t0.Add(time.Second), request("/t", "", ""))
	if d.Allowed || d.Refused.Rule.Limit.(limiter.Window).Period != limiter.Day {
		t.Fatalf("refusal by %+v, want the day rule", d.Refused)
	}
	if d.Refused.RetryAfter != 2*limiter.Day-time.Second {
		t.Fatalf("RetryAfter %v, want the day rule's", d.Refused.RetryAfter)
	}
}

func TestFormatReset(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "0s",
		time.Second:             "1s",
		6 * time.Minute:         "6m0s",
		20 * time.Millisecond:   "20ms",
		1500 * time.Microsecond: "2ms",
		90*time.Second + 1:      "1m30.001s",
	} {
		if got := limiter.FormatReset(d); got != want {
			t.Errorf("FormatReset(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestParseUserPath(t *testing.T) {
	for _, p := range []string{"/", "/team", "/team/alpha", "/a-b/c_d/É"} {
		if _, err := limiter.ParseUserPath(p); err != nil {
			t.Errorf("ParseUserPath(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", "team", "/team/", "//", "/team//a", "/./a", "/a/..", "/a/\x00", strings.Repeat("/a", 300)} {
		if _, err := limiter.ParseUserPath(p); err == nil {
			t.Errorf("ParseUserPath(%q) accepted", p)
		}
	}
	within := []struct {
		path, ancestor string
		want           bool
	}{
		{"/team/app", "/team", true},
		{"/team", "/team", true},
		{"/Team/App", "/team", true},
		{"/team-alpha", "/team", false},
		{"/anything", "/", true},
		{"/te", "/team", false},
	}
	for _, w := range within {
		if got := limiter.PathWithin(w.path, w.ancestor); got != w.want {
			t.Errorf("PathWithin(%q, %q) = %v", w.path, w.ancestor, got)
		}
	}
}

func TestNewRulesReportsEveryProblem(t *testing.T) {
	_, err := limiter.NewRules([]limiter.Rule{
		userRule("/ok", limiter.Minute, 1, 0),
		userRule("/OK", limiter.Minute, 2, 0), // duplicate: case folded
		userRule("/bad//path", limiter.Minute, 1, 0),
		{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: -1}, PerChild: true},
		{Scope: limiter.ScopeUserPath, Subject: "/c", Limit: limiter.Gauge{MaxInFlight: 2500}},
		{Scope: limiter.ScopeUserPath, Subject: "/p", Limit: limiter.Window{Period: 1500 * time.Millisecond, MaxRequests: 1}},
	})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"rule 1 (/OK minute): duplicate of rule 0",
		"rule 2 (/bad//path minute): user_path: user path \"/bad//path\" has an empty segment",
		"per_child: only user_path rules can be per child",
		"max_requests: negative limit -1",
		"max_requests: 2500 in flight is more than 1000 per shard; set shards to at least 3",
		"period_seconds: 1.5s is not a whole number of seconds",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

func TestShardedRuleHoldsExactly(t *testing.T) {
	// A provider rule of 10/minute over 4 shards: never more than 10
	// admitted, and refusals only once every shard is full.
	l := newLimiter(t, limiter.Rule{Scope: limiter.ScopeProvider, Subject: "hot", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 10}, Shards: 4})
	n := 0
	for range 40 {
		if admit(t, l, t0, request("/", "hot", "m")).Allowed {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("%d admitted over 4 shards, want exactly 10", n)
	}
	us, err := l.AllUsage(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Dimensions[0].Used != 10 || us[0].Dimensions[0].Remaining != 0 {
		t.Fatalf("usage %+v, want 10 used and none remaining", us)
	}
}

func TestUsage(t *testing.T) {
	l := newLimiter(t,
		userRule("/u", limiter.Minute, 10, 100),
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/u", Limit: limiter.Gauge{MaxInFlight: 3}},
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/kids", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 3}, PerChild: true},
	)
	r := request("/u/app", "", "")
	r.InputTokens = 30
	admit(t, l, t0, r)
	admit(t, l, t0, request("/kids/amy", "", ""))
	all, err := l.AllUsage(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("AllUsage listed %d rules, want 2 (per_child template left out)", len(all))
	}
	if d := all[0].Dimensions; len(d) != 2 || d[0].Used != 1 || d[1].Used != 30 || d[1].Remaining != 70 {
		t.Fatalf("minute rule usage %+v", d)
	}
	if d := all[1].Dimensions; len(d) != 1 || d[0].Kind != limiter.KindInFlight || d[0].Used != 1 {
		t.Fatalf("concurrent rule usage %+v", d)
	}
	mine, err := l.Usage(context.Background(), t0, limiter.Subject{UserPath: "/kids/amy/x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 1 || mine[0].Child != "amy" || mine[0].Dimensions[0].Used != 1 {
		t.Fatalf("per-child usage %+v, want amy's own counter", mine)
	}
}

// The defect of old: raising shards on a live rule from 1 to 4 let the
// new shards admit 75 more in the window that had already admitted the
// limit. Now the layout changes at the next window boundary, and the first
// window of the new layout carries the old one's count.
func TestShardsChangeOnLiveRule(t *testing.T) {
	store := memstore.New()
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "hot", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 100}}
	rs, _ := limiter.NewRules([]limiter.Rule{rule})
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	count := func(at time.Time, n int) int {
		got := 0
		for range n {
			if admit(t, l, at, request("/", "hot", "m")).Allowed {
				got++
			}
		}
		return got
	}
	if n := count(t0.Add(10*time.Second), 150); n != 100 {
		t.Fatalf("%d admitted before the change, want 100", n)
	}
	// Shards raised to 4, as every instance learns it from the config
	// store: in force from the first window boundary after 20 s.
	rule.Shards, rule.ShardHistory = 4, []limiter.ShardLayout{{Shards: 1}, {Shards: 4, Since: t0.Add(20 * time.Second)}}
	rs, err := limiter.NewRules([]limiter.Rule{rule})
	if err != nil {
		t.Fatal(err)
	}
	l.SetRules(rs)
	if n := count(t0.Add(30*time.Second), 100); n != 0 {
		t.Fatalf("%d more admitted in the window after the change, want 0", n)
	}
	// The next window: the previous one's 100 weigh on the new shards.
	if n := count(t0.Add(60*time.Second), 100); n != 0 {
		t.Fatalf("%d admitted at the start of the next window, want 0 (the previous window was full)", n)
	}
	// Half-way, about half the limit is free again (a little less: each
	// shard rounds down).
	half := count(t0.Add(90*time.Second), 100)
	if half < 45 || half > 50 {
		t.Fatalf("%d admitted half-way through the next window, want about 50 and never more", half)
	}
	// And back down to one shard, the same way: a change asked for at
	// 95 s counts from when the last one no longer needs its old layout,
	// the window after the first of the new layout (120 s).
	next := limiter.NextLayoutChange(rule, limiter.DefaultLeaseTTL)
	if want := t0.Add(120 * time.Second); !next.Equal(want) {
		t.Fatalf("next layout change from %v, want %v", next.Sub(t0), want.Sub(t0))
	}
	rule.Shards, rule.ShardHistory = 1, append(rule.ShardHistory, limiter.ShardLayout{Shards: 1, Since: next})
	rs, _ = limiter.NewRules([]limiter.Rule{rule})
	l.SetRules(rs)
	// Until then the four shards count: at 100 s the old window weighs a
	// third (33), so no more than 100 − 33 − half fit.
	late := count(t0.Add(100*time.Second), 100)
	if late > 100-34-half || late < 100-34-half-8 {
		t.Fatalf("%d admitted at 100 s after %d at 90 s, want about %d and never more", late, half, 100-34-half)
	}
	// At 150 s one shard counts again, the four shards' window weighing
	// half: exactly what one counter would admit.
	want := 100 - (half+late+1)/2
	if n := count(t0.Add(150*time.Second), 100); n != want {
		t.Fatalf("%d admitted at 150 s on one shard again, want %d", n, want)
	}
	us, err := l.AllUsage(context.Background(), t0.Add(150*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d := us[0].Dimensions[0]; d.Previous != int64(half+late) || d.Remaining != 0 {
		t.Fatalf("usage after the switch back: %+v", d)
	}
}

// A concurrency rule whose shards change refuses for a few seconds (the
// old layout's admissions land), then admits what the old layout's slots
// leave of the limit, until they are given back.
func TestConcurrencyShardsChange(t *testing.T) {
	store := memstore.New()
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "hot", Limit: limiter.Gauge{MaxInFlight: 4}}
	rs, _ := limiter.NewRules([]limiter.Rule{rule})
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	var held []*limiter.Lease
	for range 4 {
		d := admit(t, l, t0, request("/", "hot", "m"))
		if !d.Allowed {
			t.Fatal("refused below the limit")
		}
		held = append(held, d.Lease)
	}
	rule.Shards, rule.ShardHistory = 2, []limiter.ShardLayout{{Shards: 1}, {Shards: 2, Since: t0.Add(time.Second)}}
	rs, _ = limiter.NewRules([]limiter.Rule{rule})
	l.SetRules(rs)
	for _, at := range []time.Duration{500 * time.Millisecond, 2 * time.Second, 7 * time.Second} {
		if admit(t, l, t0.Add(at), request("/", "hot", "m")).Allowed {
			t.Fatalf("admitted at %v with 4 of 4 slots held by the old layout", at)
		}
	}
	for _, ls := range held[:2] {
		if err := l.Complete(context.Background(), t0.Add(8*time.Second), ls, limiter.Usage{Exact: true}); err != nil {
			t.Fatal(err)
		}
	}
	at := t0.Add(10 * time.Second)
	n := 0
	for range 5 {
		if admit(t, l, at, request("/", "hot", "m")).Allowed {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d admitted on the new layout with 2 old slots still held, want 2", n)
	}
}

// A streams gauge (max_streams) beside the subject's concurrency gauge:
// its own counter and id, counting streaming requests only, the shortest
// max_stream_duration on the lease, its slot given back at completion.
func TestStreamsGaugeCountsStreamsOnly(t *testing.T) {
	streams := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/live", Limit: limiter.Gauge{MaxInFlight: 1, Streams: true, MaxDuration: time.Minute}}
	all := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/live", Limit: limiter.Gauge{MaxInFlight: 3}}
	if streams.Key() == all.Key() || streams.ID() != "user_path:/live:streams" {
		t.Fatalf("the streams gauge is %s (key %s), the other %s", streams.ID(), streams.Key(), all.Key())
	}
	if back, err := limiter.ParseRuleID(streams.ID()); err != nil || back.Key() != streams.Key() {
		t.Fatalf("ParseRuleID(%s) = %v, %v", streams.ID(), back.Key(), err)
	}
	if err := (limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/x", Limit: limiter.Gauge{MaxInFlight: 1, MaxDuration: time.Second}}).Validate(); err == nil {
		t.Fatal("a max_stream_duration on a gauge that counts every request is accepted")
	}
	l := newLimiter(t, streams, all)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	stream := func() limiter.Request { r := request("/live/a", "openai", "gpt-4o"); r.Stream = true; return r }
	first := admit(t, l, now, stream())
	if !first.Allowed || first.Lease.MaxStreamDuration != time.Minute {
		t.Fatalf("the first stream: %+v", first)
	}
	if d := admit(t, l, now, stream()); d.Allowed || d.Refused.Rule.Key() != streams.Key() {
		t.Fatalf("a second stream: %+v, want refused by the streams gauge", d)
	}
	for i := range 2 {
		if d := admit(t, l, now, request("/live/b", "openai", "gpt-4o")); !d.Allowed || d.Lease.MaxStreamDuration != 0 {
			t.Fatalf("request %d that does not stream: %+v", i, d)
		}
	}
	if err := l.Complete(context.Background(), now, first.Lease, limiter.Usage{}); err != nil {
		t.Fatal(err)
	}
	if d := admit(t, l, now, stream()); !d.Allowed {
		t.Fatalf("a stream once the first completed: %+v", d.Refused)
	}
	if d := admit(t, l, now, request("/live/c", "openai", "gpt-4o")); d.Allowed || d.Refused.Rule.Key() != all.Key() {
		t.Fatal("a fourth request in flight, streams counted, is admitted past the concurrency gauge's 3")
	}
}

// An admission that keeps none of its charges plans the next one in the
// same memory; a refusal and a lease keep theirs: what a refusal says of
// its counter holds however many admissions follow it.
func TestDecisionsKeepTheirChargesWhileOthersReuseTheirs(t *testing.T) {
	l := newLimiter(t,
		userRule("/full", limiter.Minute, 1, 0),
		userRule("/free", limiter.Minute, 1<<40, 0),
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/held", Limit: limiter.Gauge{MaxInFlight: 100}},
	)
	admit(t, l, t0, request("/full", "p", "m"))
	refused := admit(t, l, t0, request("/full", "p", "m"))
	if refused.Allowed {
		t.Fatal("second request to a limit of 1 admitted")
	}
	held := admit(t, l, t0, request("/held", "p", "m"))
	if held.Lease == nil {
		t.Fatal("no lease for a slot")
	}
	room := refused.Refused.RoomAt(t0.Add(time.Minute))
	for i := range 100 {
		if d := admit(t, l, t0.Add(time.Duration(i)), request("/free/a", "p", "m")); !d.Allowed || d.Lease != nil {
			t.Fatalf("admission %d: %+v", i, d)
		}
	}
	if r := refused.Refused; r.Rule.Subject != "/full" || r.RoomAt(t0.Add(time.Minute)) != room || room < 0 {
		t.Fatalf("refusal changed under later admissions: %+v, room %d then %d", r.Rule, room, r.RoomAt(t0.Add(time.Minute)))
	}
	if c := held.Lease.Charges; len(c) != 1 || c[0].Counter.Rule != "user_path:/held:c" || c[0].Limit != 100 {
		t.Fatalf("lease's charges changed under later admissions: %+v", c)
	}
}
