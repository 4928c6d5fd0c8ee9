package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// The policy model on a store: budgets, buckets, fixed windows, shadow
// rules and explanations, through the limiter, as the gateway uses them.

// newLimiter returns a limiter on s with rules.
func newLimiter(t *testing.T, s limiter.Store, rules ...limiter.Rule) *limiter.Limiter {
	t.Helper()
	rs, err := limiter.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: s, Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var reqSeq sync.Map

// admit makes one admission of the given size for /team/app.
func admit(t *testing.T, l *limiter.Limiter, now time.Time, in, out int64, price limiter.Price) limiter.Decision {
	t.Helper()
	n, _ := reqSeq.LoadOrStore(t.Name(), new(int))
	seq := n.(*int)
	*seq++
	d, err := l.Admit(context.Background(), now, limiter.Request{
		ID:           fmt.Sprintf("%s-%d-%d", t.Name(), now.UnixNano(), *seq),
		Subject:      limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
		Route:        "chat",
		InputTokens:  in,
		OutputTokens: out,
		Price:        price,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// budgetPrice makes a request of 100 input and 100 output tokens reserve
// $0.003: three fit a $0.01 budget, a fourth does not.
var budgetPrice = limiter.Price{Input: 10_000_000, Output: 20_000_000, CachedInput: 5_000_000}

func budgetRule() limiter.Rule { return budgetOf(10_000) }

// budgetOf is a daily budget of maxCost micro-dollars on /team.
func budgetOf(maxCost int64) limiter.Rule {
	return limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Budget{MaxCost: maxCost, Calendar: limiter.CalendarDay}}
}

// A $0.01 daily budget admits three requests reserving $0.003 each. The
// fourth is refused for what is reserved, not spent: a retryable wait
// until the reservations are expected settled (limiter.DefaultSettleWait),
// after which, once settlement turned them into what they cost, a retry
// is admitted. When spent money leaves no room, the refusal is for the
// rest of the period. What is reserved and what is spent are read apart.
func testBudgetReservesAndSettles(t *testing.T, open Opener) {
	s := open()
	l := newLimiter(t, s, budgetRule())
	now := T0.Add(10 * time.Hour)
	var leases []*limiter.Lease
	for i := range 3 {
		d := admit(t, l, now, 100, 100, budgetPrice)
		if !d.Allowed {
			t.Fatalf("request %d refused: %s", i, d.Refused.Message())
		}
		if want := int64(10_000 - 3_000*(i+1)); d.Budget.Remaining != want {
			t.Fatalf("request %d: budget remaining %d, want %d", i, d.Budget.Remaining, want)
		}
		leases = append(leases, d.Lease)
	}
	d := admit(t, l, now, 100, 100, budgetPrice)
	if d.Allowed || !d.Refused.IsBudget() {
		t.Fatalf("fourth request: %+v, want a budget refusal", d)
	}
	if r := d.Refused; !r.ReservedOnly || !r.Retryable || r.RetryAfter != limiter.DefaultSettleWait || r.Spent != 0 || r.Reserved != 9_000 {
		t.Fatalf("refused while only reserved: %+v, want a retryable wait of %v with $0 spent and $0.009 reserved",
			r, limiter.DefaultSettleWait)
	}
	if msg := d.Refused.Message(); !strings.Contains(msg, "reserved, not spent") || !strings.Contains(msg, "$0.00 spent and $0.009 reserved") {
		t.Fatalf("message %q does not give both amounts", msg)
	}
	u := usageOf(t, l, now)
	if u.Used != 9_000 || u.Reserved != 9_000 {
		t.Fatalf("before settlement used %d reserved %d, want 9000 and 9000", u.Used, u.Reserved)
	}
	// Each used 100 input tokens, 50 of them from the cache, and 25 output
	// tokens: 50×10 + 50×5 + 25×20 = 1250 µ$ per million … $0.00125.
	used := limiter.Usage{InputTokens: 50, CachedInputTokens: 50, OutputTokens: 25, Exact: true}
	var ss []limiter.Settlement
	for _, ls := range leases {
		if err := s.Complete(context.Background(), now, ls, used); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, limiter.Settlement{Lease: ls, Used: used})
	}
	for range 2 { // exactly once
		if _, err := s.Settle(context.Background(), ss); err != nil {
			t.Fatal(err)
		}
	}
	u = usageOf(t, l, now)
	if u.Used != 3*1_250 || u.Reserved != 0 || u.Remaining != 10_000-3*1_250 {
		t.Fatalf("after settlement used %d reserved %d remaining %d, want 3750, 0 and 6250", u.Used, u.Reserved, u.Remaining)
	}
	// The retry, at its Retry-After, is admitted.
	retry := now.Add(d.Refused.RetryAfter)
	d2 := admit(t, l, retry, 100, 100, budgetPrice)
	if !d2.Allowed {
		t.Fatalf("the retry at Retry-After was refused: %s", d2.Refused.Message())
	}
	// Spend what is left: a bill of $0.00625 settles at once, so the
	// budget is all spent but the retry's $0.003 reservation.
	if _, err := l.Bill(context.Background(), retry, t.Name()+"-bill", limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
		limiter.Usage{OutputTokens: 313}, budgetPrice); err != nil {
		t.Fatal(err)
	}
	d3 := admit(t, l, retry, 100, 100, budgetPrice)
	if d3.Allowed || !d3.Refused.IsBudget() {
		t.Fatalf("a spent budget admitted: %+v", d3)
	}
	if r := d3.Refused; r.ReservedOnly || !r.Retryable || r.RetryAfter != 14*time.Hour-d.Refused.RetryAfter || r.Spent != 3*1_250+6_260 || r.Reserved != 3_000 {
		t.Fatalf("refused with money spent: %+v, want the rest of the day (%v) with $0.01001 spent and $0.003 reserved",
			r, 14*time.Hour-d.Refused.RetryAfter)
	}
	// The next day is a new period.
	if d := admit(t, l, T0.Add(24*time.Hour), 100, 100, budgetPrice); !d.Allowed || d.Budget.Remaining != 7_000 {
		t.Fatalf("next day: %+v", d)
	}
}

func usageOf(t *testing.T, l *limiter.Limiter, now time.Time) limiter.DimensionUsage {
	t.Helper()
	us, err := l.Usage(context.Background(), now, limiter.Subject{UserPath: "/team/app"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		for _, d := range u.Dimensions {
			if d.Kind == limiter.KindCost {
				return d
			}
		}
	}
	t.Fatal("no budget in the usage")
	return limiter.DimensionUsage{}
}

// Many clients at once never reserve past a budget: with each request
// reserving $0.003 of $0.10, exactly 33 are admitted.
func testHammerBudget(t *testing.T, open Opener) {
	now := T0.Add(time.Hour)
	rule := budgetOf(100_000)
	var mu sync.Mutex
	var leases []*limiter.Lease
	n := hammer(t, open, workers, perWorker, func(s limiter.Store, i int) (bool, error) {
		rs, _ := limiter.NewRules([]limiter.Rule{rule})
		l, _ := limiter.New(limiter.Config{Store: s, Rules: rs})
		d, err := l.Admit(context.Background(), now, limiter.Request{
			ID: fmt.Sprintf("hb-%d", i), Subject: limiter.Subject{UserPath: "/team/x"}, InputTokens: 100, OutputTokens: 100, Price: budgetPrice,
		})
		if d.Allowed {
			mu.Lock()
			leases = append(leases, d.Lease)
			mu.Unlock()
		}
		return d.Allowed, err
	})
	if n != 33 {
		t.Fatalf("%d admitted, want exactly 33 ($0.099 of $0.10)", n)
	}
	l := newLimiter(t, open(), rule)
	us, err := l.Usage(context.Background(), now, limiter.Subject{UserPath: "/team/x"})
	if err != nil || len(us) != 1 || us[0].Dimensions[0].Used != 99_000 {
		t.Fatalf("budget holds %+v (%v), want 99000", us, err)
	}
}

// A bucket of 3 refilling 1 a second passes a burst of 3, then one a
// second, and is full again after an idle spell; a request larger than
// the bucket is refused for good.
func testBucketBurstThenRate(t *testing.T, open Opener) {
	s := open()
	rule := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Bucket{Capacity: 3, RefillPerSecond: 1}}
	l := newLimiter(t, s, rule)
	now := T0.Add(time.Minute)
	for i := range 3 {
		if d := admit(t, l, now, 1, 1, limiter.Price{}); !d.Allowed {
			t.Fatalf("burst request %d refused", i)
		}
	}
	d := admit(t, l, now, 1, 1, limiter.Price{})
	if d.Allowed || d.Refused.RetryAfter != time.Second {
		t.Fatalf("fourth request: allowed %v, refusal %+v, want a refusal for exactly 1s", d.Allowed, d.Refused)
	}
	if d := admit(t, l, now.Add(999*time.Millisecond), 1, 1, limiter.Price{}); d.Allowed || d.Refused.RetryAfter != time.Millisecond {
		t.Fatalf("a millisecond early: %+v", d.Refused)
	}
	if d := admit(t, l, now.Add(time.Second), 1, 1, limiter.Price{}); !d.Allowed || d.Requests.Remaining != 0 {
		t.Fatalf("after a second: allowed %v remaining %d", d.Allowed, d.Requests.Remaining)
	}
	// Idle for a minute: the bucket is full, never fuller.
	later := now.Add(time.Minute)
	for i := range 3 {
		if d := admit(t, l, later, 1, 1, limiter.Price{}); !d.Allowed {
			t.Fatalf("after idling, request %d refused", i)
		}
	}
	if d := admit(t, l, later, 1, 1, limiter.Price{}); d.Allowed {
		t.Fatal("after idling, a fourth request passed: the bucket held more than its capacity")
	}
	tokens := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Bucket{Tokens: true, Capacity: 100, RefillPerSecond: 10}}
	lt := newLimiter(t, s, tokens)
	if d := admit(t, lt, later, 60, 41, limiter.Price{}); d.Allowed || d.Refused.Retryable {
		t.Fatalf("101 tokens in a bucket of 100: %+v", d.Refused)
	}
}

// A token bucket is settled like a token window: a refund gives its
// refill time back, exactly once.
func testBucketSettled(t *testing.T, open Opener) {
	s := open()
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Bucket{Tokens: true, Capacity: 100, RefillPerSecond: 10}}
	l := newLimiter(t, s, rule)
	now := T0.Add(time.Minute)
	d := admit(t, l, now, 20, 80, limiter.Price{})
	if !d.Allowed {
		t.Fatal("refused")
	}
	if d2 := admit(t, l, now, 1, 0, limiter.Price{}); d2.Allowed {
		t.Fatal("a full reservation left room")
	}
	used := limiter.Usage{InputTokens: 20, OutputTokens: 10, Exact: true}
	st := limiter.Settlement{Lease: d.Lease, Used: used}
	for range 2 {
		if _, err := s.Settle(context.Background(), []limiter.Settlement{st}); err != nil {
			t.Fatal(err)
		}
	}
	// 70 tokens were given back, and no more.
	if d := admit(t, l, now, 35, 35, limiter.Price{}); !d.Allowed {
		t.Fatalf("the refund did not reach the bucket: %s", d.Refused.Message())
	}
	if d := admit(t, l, now, 1, 0, limiter.Price{}); d.Allowed {
		t.Fatal("the refund was applied twice")
	}
}

// A fixed window counts on its own: at its last instant it is full, at
// the next window's first it is empty (no sliding carry-over).
func testFixedWindow(t *testing.T, open Opener) {
	s := open()
	rule := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, Fixed: true, MaxRequests: 2}}
	l := newLimiter(t, s, rule)
	end := T0.Add(2 * time.Minute)
	last := end.Add(-time.Nanosecond)
	for range 2 {
		if d := admit(t, l, last.Add(-time.Second), 1, 1, limiter.Price{}); !d.Allowed {
			t.Fatal("refused within the limit")
		}
	}
	d := admit(t, l, last, 1, 1, limiter.Price{})
	if d.Allowed || d.Refused.RetryAfter != time.Nanosecond {
		t.Fatalf("third: %+v, want a refusal until the window's end", d.Refused)
	}
	for range 2 {
		if d := admit(t, l, end, 1, 1, limiter.Price{}); !d.Allowed {
			t.Fatal("the new window did not start empty")
		}
	}
}

// A shadow rule counts but never refuses, and says when it would have.
func testShadowNeverRefuses(t *testing.T, open Opener) {
	s := open()
	shadow := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxRequests: 2}, Shadow: true}
	shadowFly := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Gauge{MaxInFlight: 1}, Shadow: true}
	shadowBudget := budgetOf(5_000)
	shadowBudget.Shadow = true
	l := newLimiter(t, s, shadow, shadowFly, shadowBudget)
	now := T0.Add(time.Minute)
	for i := range 4 {
		d := admit(t, l, now, 100, 100, budgetPrice)
		if !d.Allowed {
			t.Fatalf("request %d refused by a shadow rule: %s", i, d.Refused.Message())
		}
		want := map[int]int{0: 0, 1: 2, 2: 3, 3: 3}[i] // in flight from the second on; budget from the second; window from the third
		if len(d.Shadow) != want {
			t.Fatalf("request %d: %d shadow refusals %+v, want %d", i, len(d.Shadow), d.Shadow, want)
		}
	}
	if u := usageOf(t, l, now); u.Used != 12_000 {
		t.Fatalf("the shadow budget counted %d, want 12000", u.Used)
	}
}

// Explain reads what Admit would decide and charges nothing.
func testExplainChargesNothing(t *testing.T, open Opener) {
	s := open()
	window := limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1}}
	l := newLimiter(t, s, window, budgetRule())
	now := T0.Add(time.Minute)
	req := limiter.Request{ID: "explain", Subject: limiter.Subject{UserPath: "/team/app"}, InputTokens: 100, OutputTokens: 100, Price: budgetPrice}
	for range 3 {
		ex, err := l.Explain(context.Background(), now, req)
		if err != nil {
			t.Fatal(err)
		}
		if !ex.Decision.Allowed || len(ex.Rules) != 2 || ex.Rules[0].Used != 0 || ex.Rules[1].Amount != 3_000 {
			t.Fatalf("explain: %+v", ex)
		}
	}
	if d := admit(t, l, now, 100, 100, budgetPrice); !d.Allowed {
		t.Fatal("explain charged the window")
	}
	ex, err := l.Explain(context.Background(), now, req)
	if err != nil {
		t.Fatal(err)
	}
	// One request in the window: the sliding estimate admits the next
	// when the window after this one ends.
	if ex.Decision.Allowed || !ex.Rules[0].WouldRefuse || ex.Decision.Refused.RetryAfter != 2*time.Minute {
		t.Fatalf("explain after the limit: %+v", ex)
	}
	if u := usageOf(t, l, now); u.Used != 3_000 {
		t.Fatalf("budget holds %d after explaining, want one request's 3000", u.Used)
	}
}

// Bill charges spent usage exactly once, on either side of a bucket's
// max(value, now): a bucket that was full takes the debt from now, one
// that was refilling from where it was.
func testBillExactlyOnce(t *testing.T, open Opener) {
	rules := []limiter.Rule{
		{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Hour, MaxTokens: 1000}},
		budgetRule(),
		{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Bucket{Tokens: true, Capacity: 100, RefillPerSecond: 10}},
	}
	now := T0.Add(5 * time.Hour)
	s := limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"}
	used := limiter.Usage{InputTokens: 30, OutputTokens: 20} // 50 tokens: 5 s of refill
	for i := range 3 {
		l := newLimiter(t, open(), rules...) // another client each time
		applied, err := l.Bill(context.Background(), now, "batch-full", s, used, budgetPrice)
		if err != nil || applied != (i == 0) {
			t.Fatalf("bill %d: applied %v, %v", i, applied, err)
		}
	}
	l := newLimiter(t, open(), rules...)
	// The bucket was full: 50 tokens are owed from now, 50 are left.
	if d := admit(t, l, now, 25, 25, budgetPrice); !d.Allowed {
		t.Fatalf("the bucket lacks more than the bill: %s", d.Refused.Message())
	}
	if d := admit(t, l, now, 1, 0, budgetPrice); d.Allowed || d.Refused.RetryAfter != 100*time.Millisecond {
		t.Fatalf("after the bill and 50 tokens: %+v", d.Refused)
	}
	// Refilling now (10 s owed): a second bill adds to where it is.
	if applied, err := l.Bill(context.Background(), now, "batch-refilling", s, used, budgetPrice); err != nil || !applied {
		t.Fatalf("second bill: %v %v", applied, err)
	}
	// 15 s owed now, of a 10 s bucket: a token fits once 9.9 s are owed.
	if d := admit(t, l, now.Add(5*time.Second), 1, 0, budgetPrice); d.Allowed || d.Refused.RetryAfter != 100*time.Millisecond {
		t.Fatalf("the second bill did not land on the refilling bucket: %+v", d.Refused)
	}
	if d := admit(t, l, now.Add(5100*time.Millisecond), 1, 0, budgetPrice); !d.Allowed {
		t.Fatalf("5.1 s after: %s", d.Refused.Message())
	}
	u := usageOf(t, l, now)
	// Two bills of 30 in + 20 out at $10/$20 per million: 700 µ$ each,
	// beside the reservations of the requests admitted (25+25 and 1+0).
	if u.Used != 2*700+750+10 || u.Reserved != 750+10 {
		t.Fatalf("budget used %d reserved %d", u.Used, u.Reserved)
	}
}

// Fair share through the store, two instances (two limiters on two
// clients of the backend) in simulated time: a rule of 60 a minute shared
// by /t/a and /t/b; /t/a floods with 2 clients asking every 500 ms while
// /t/b asks every 2 s (its share): b gets at least 90 % in, and the limit
// holds.
func testFairShare(t *testing.T, open Opener) {
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: 60},
		FairShare: &limiter.FairShare{By: "user_path"}}
	ls := []*limiter.Limiter{newLimiter(t, open(), rule), newLimiter(t, open(), rule)}
	n := 0
	try := func(now time.Time, path string) bool {
		n++
		d, err := ls[n%2].Admit(context.Background(), now, limiter.Request{ID: fmt.Sprintf("%s-%d", t.Name(), n),
			Subject: limiter.Subject{UserPath: path, Provider: "openai", Model: "gpt-4o"}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	const tick = 500 * time.Millisecond
	var a, b, asked int
	admittedAt := map[int64]int{} // by window, to check the limit
	for i := range int(3 * time.Minute / tick) {
		now := T0.Add(time.Duration(i) * tick)
		counted := now.Sub(T0) >= time.Minute
		for range 2 {
			if try(now, "/t/a") {
				admittedAt[now.UnixNano()/int64(time.Minute)]++
				if counted {
					a++
				}
			}
		}
		if time.Duration(i)*tick%(2*time.Second) == 0 {
			ok := try(now, "/t/b")
			if ok {
				admittedAt[now.UnixNano()/int64(time.Minute)]++
			}
			if counted {
				asked++
				if ok {
					b++
				}
			}
		}
	}
	if b*10 < asked*9 {
		t.Fatalf("b got %d of its %d requests in while a flooded (a got %d)", b, asked, a)
	}
	for w, got := range admittedAt {
		// The sliding window admits at most the limit over any window, so
		// at most twice it in one aligned window.
		if got > 2*60 {
			t.Fatalf("window %d admitted %d against 60 a minute", w, got)
		}
	}
	if a+b > 2*60+60 {
		t.Fatalf("%d admitted in 2 minutes against 60 a minute", a+b)
	}
}

// Fair share on a concurrency rule through the store: 4 slots shared by
// /t/a, which keeps 3 requests of a second trying, and /t/b, which starts
// one every 500 ms (its share of two in flight): b gets 90 % in, and the
// rule never holds more than its 4 slots.
func testFairShareInFlight(t *testing.T, open Opener) {
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Gauge{MaxInFlight: 4},
		FairShare: &limiter.FairShare{By: "user_path"}}
	ls := []*limiter.Limiter{newLimiter(t, open(), rule), newLimiter(t, open(), rule)}
	run := InFlightRun{Slots: 4, Clients: 3, D: 12 * time.Second, Tick: 250 * time.Millisecond, BEvery: 500 * time.Millisecond, BStart: 2 * time.Second}
	if bIn, bAsked, _ := run.Drive(t, ls); bIn*10 < bAsked*9 {
		t.Fatalf("b got %d of its %d requests in", bIn, bAsked)
	}
}

// InFlightRun is a fair-share run on a concurrency rule of Slots slots,
// through limiters taken in turn, for D of simulated time from T0: every
// Tick, Clients requests of /t/a that each hold a slot for a second try,
// and from BStart one request of /t/b every BEvery (a multiple of Tick).
type InFlightRun struct {
	Slots, Clients          int
	D, Tick, BEvery, BStart time.Duration
}

// Drive runs it and returns b's admissions and askings and a's
// admissions; it fails the test the moment more than Slots are in flight.
func (run InFlightRun) Drive(t *testing.T, ls []*limiter.Limiter) (bIn, bAsked, aIn int) {
	t.Helper()
	type held struct {
		l     *limiter.Limiter
		lease *limiter.Lease
		until time.Time
	}
	var inFlight []held
	n := 0
	try := func(now time.Time, path string) bool {
		n++
		l := ls[n%len(ls)]
		d, err := l.Admit(context.Background(), now, limiter.Request{ID: fmt.Sprintf("%s-%d", t.Name(), n),
			Subject: limiter.Subject{UserPath: path, Provider: "openai", Model: "gpt-4o"}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			inFlight = append(inFlight, held{l, d.Lease, now.Add(time.Second)})
			if len(inFlight) > run.Slots {
				t.Fatalf("%d in flight against %d slots", len(inFlight), run.Slots)
			}
		}
		return d.Allowed
	}
	bTicks := int(run.BEvery / run.Tick)
	for i := range int(run.D / run.Tick) {
		now := T0.Add(time.Duration(i) * run.Tick)
		kept := inFlight[:0]
		for _, h := range inFlight {
			if !now.Before(h.until) {
				if err := h.l.Complete(context.Background(), now, h.lease, limiter.Usage{Exact: true}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			kept = append(kept, h)
		}
		inFlight = kept
		for range run.Clients {
			if try(now, "/t/a") {
				aIn++
			}
		}
		if i%bTicks == 0 && now.Sub(T0) >= run.BStart {
			bAsked++
			if try(now, "/t/b") {
				bIn++
			}
		}
	}
	return bIn, bAsked, aIn
}

// Bedrock's quota arithmetic through the store, on two clients: a Claude
// model rule of 60,000 tokens a minute charges a request of 100 prompt
// tokens and max_tokens 1,000 at 100 + 1,000 × 5, so 11 are admitted and
// the 12th is refused; settled (twice: exactly once) to 200 output tokens
// each, the rule holds 100 + 200 × 5 per request, and the 40 cache-read
// tokens of one are given back.
func testBedrockQuota(t *testing.T, open Opener) {
	const model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
	rule := limiter.Rule{Scope: limiter.ScopeModel, Subject: "bedrock/" + model, Limit: limiter.Window{Period: time.Minute, MaxTokens: 60_000, Quota: limiter.QuotaBedrock}}
	ls := []*limiter.Limiter{newLimiter(t, open(), rule), newLimiter(t, open(), rule)}
	now := T0.Add(3*time.Hour + 5*time.Second)
	var leases []*limiter.Lease
	for i := range 12 {
		d, err := ls[i%2].Admit(context.Background(), now, limiter.Request{
			ID: fmt.Sprintf("%s-%d", t.Name(), i), Subject: limiter.Subject{UserPath: "/team/app", Provider: "bedrock", Model: model},
			Route: "chat", InputTokens: 100, OutputTokens: 1000, OutputBurndown: 5,
		})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 11) {
			t.Fatalf("request %d: allowed %v; want 11 admitted at 5,100 each", i+1, d.Allowed)
		}
		if d.Allowed {
			leases = append(leases, d.Lease)
		}
	}
	s := open()
	var ss []limiter.Settlement
	for i, l := range leases {
		used := limiter.Usage{InputTokens: 100, OutputTokens: 200, Exact: true}
		if i == 0 {
			used = limiter.Usage{InputTokens: 60, CacheWriteInputTokens: 10, CachedInputTokens: 40, OutputTokens: 200, Exact: true}
		}
		if err := s.Complete(context.Background(), now, l, used); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, limiter.Settlement{Lease: l, Used: used})
	}
	for range 2 {
		if _, err := s.Settle(context.Background(), ss); err != nil {
			t.Fatal(err)
		}
	}
	us, err := ls[0].AllUsage(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Dimensions[0].Used != 11*1_100-40 {
		t.Fatalf("settled, the rule holds %+v, want %d", us, 11*1_100-40)
	}
}
