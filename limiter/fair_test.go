package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/storetest"
)

// fairRun drives two limiters (two instances) over one store through
// simulated time: every tick each flooding member tries once per client,
// and b tries every bEvery (0: never); it returns what each got in and
// what b asked, over the minutes after the first.
func fairRun(t *testing.T, weights map[string]int64, aClients, bClients int, bEvery time.Duration) (a, b, bAsked int) {
	t.Helper()
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: 60},
		FairShare: &limiter.FairShare{By: "user_path", Weights: weights}}
	ls := twoInstances(t, rule)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	const tick = 250 * time.Millisecond
	n := 0
	try := func(now time.Time, path string) bool {
		n++
		d, err := ls[n%2].Admit(context.Background(), now, limiter.Request{ID: fmt.Sprint(n),
			Subject: limiter.Subject{UserPath: path, Provider: "openai", Model: "gpt-4o"}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	for i := 0; i < int(4*time.Minute/tick); i++ {
		now := t0.Add(time.Duration(i) * tick)
		counted := now.Sub(t0) >= time.Minute
		for range aClients {
			if try(now, "/t/a") && counted {
				a++
			}
		}
		for range bClients {
			if try(now, "/t/b") && counted {
				b++
			}
		}
		// b starts after a has filled the window: refused first, it must
		// stop a borrowing its share.
		if bEvery > 0 && time.Duration(i)*tick%bEvery == 0 && now.Sub(t0) >= 5*time.Second {
			ok := try(now, "/t/b")
			if counted {
				bAsked++
				if ok {
					b++
				}
			}
		}
	}
	return a, b, bAsked
}

// Fair share across two instances (the acceptance scenario, in simulated
// time): a provider rule of 60 a minute shared by /t/a and /t/b.
func TestFairShare(t *testing.T) {
	// /t/a floods with 4 clients, /t/b asks every 2 s: b gets ≥ 90 % in.
	a, b, asked := fairRun(t, nil, 4, 0, 2*time.Second)
	if b*10 < asked*9 {
		t.Fatalf("b got %d of its %d requests in while a flooded (a got %d)", b, asked, a)
	}
	if total := a + b; total > 3*60 {
		t.Fatalf("%d admitted in 3 minutes against 60 a minute", total)
	}
	t.Logf("a floods, b every 2 s: a %d, b %d of %d over 3 minutes", a, b, asked)

	// /t/b idle: a borrows it all, ≥ 90 % of the 60.
	a, _, _ = fairRun(t, nil, 4, 0, 0)
	if a < 3*54 || a > 3*60 {
		t.Fatalf("alone, a got %d in 3 minutes; want at least 90%% of 180", a)
	}

	// Weights 3:1, both flooding: 3:1 within 10 %.
	a, b, _ = fairRun(t, map[string]int64{"/t/a": 3, "/t/b": 1}, 4, 4, 0)
	ratio := float64(a) / float64(b)
	t.Logf("3:1, both flooding: a %d, b %d (%.2f)", a, b, ratio)
	if ratio < 2.7 || ratio > 3.3 || a+b > 3*60 {
		t.Fatalf("weights 3:1 split %d:%d (%.2f)", a, b, ratio)
	}
	// Equal weights, both flooding: even.
	a, b, _ = fairRun(t, nil, 4, 4, 0)
	if r := float64(a) / float64(b); r < 0.9 || r > 1.1 {
		t.Fatalf("equal weights split %d:%d", a, b)
	}
}

// Fair share on a concurrency rule: 4 slots shared by /t/a, which keeps
// 8 requests of a second each trying, and /t/b, which starts one every
// 500 ms (two in flight: its share): b gets at least 90 % in.
func TestFairShareInFlight(t *testing.T) {
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Gauge{MaxInFlight: 4},
		FairShare: &limiter.FairShare{By: "user_path"}}
	run := storetest.InFlightRun{Slots: 4, Clients: 8, D: 60 * time.Second, Tick: 100 * time.Millisecond, BEvery: 500 * time.Millisecond, BStart: 5 * time.Second}
	bIn, bAsked, aIn := run.Drive(t, twoInstances(t, rule))
	t.Logf("in flight: b %d of %d, a %d", bIn, bAsked, aIn)
	if bIn*10 < bAsked*9 {
		t.Fatalf("b got %d of its %d requests in while a held every slot it could", bIn, bAsked)
	}
}

// fairDrive runs /t/a flooding (clients tries a tick) and /t/b asking
// every bEvery from bStart on, through two limiters over one store, for d of
// simulated time; it returns b's admissions and askings and a's
// admissions.
func fairDrive(t *testing.T, rule limiter.Rule, d, tick, bEvery, bStart time.Duration, clients int, price limiter.Price) (b, asked, a int) {
	t.Helper()
	ls := twoInstances(t, rule)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	n := 0
	try := func(now time.Time, path string) bool {
		n++
		dec, err := ls[n%2].Admit(context.Background(), now, limiter.Request{ID: fmt.Sprint("d", n), InputTokens: 1, Price: price,
			Subject: limiter.Subject{UserPath: path, Provider: "openai", Model: "gpt-4o"}})
		if err != nil {
			t.Fatal(err)
		}
		return dec.Allowed
	}
	for i := range int(d / tick) {
		now := t0.Add(time.Duration(i) * tick)
		for range clients {
			if try(now, "/t/a") {
				a++
			}
		}
		if time.Duration(i)*tick%bEvery == 0 && now.Sub(t0) >= bStart {
			asked++
			if try(now, "/t/b") {
				b++
			}
		}
	}
	return b, asked, a
}

// Fair share on a token bucket and on a budget: the member that asks for
// less than its share gets it while the other floods.
func TestFairShareBucketAndBudget(t *testing.T) {
	bucket := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Bucket{Capacity: 60, RefillPerSecond: 1},
		FairShare: &limiter.FairShare{By: "user_path"}}
	b, asked, a := fairDrive(t, bucket, 3*time.Minute, 250*time.Millisecond, 2*time.Second, 5*time.Second, 4, limiter.Price{})
	t.Logf("bucket of 60 at 1/s: b %d of %d, a %d", b, asked, a)
	if b*10 < asked*9 {
		t.Fatalf("bucket: b got %d of %d in", b, asked)
	}
	// $0.001 an hour; a request costs $0.00001 (1 input token at $10/M):
	// 100 fit. b asks 1 every 2 s from the start while a floods. Money
	// spent is not given back, and fair share is work-conserving: nothing
	// is held for b until it is refused, so the budget is spent first come,
	// first served, to the last cent, and b is refused only once it is.
	budget := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Budget{MaxCost: 1000, Calendar: limiter.CalendarHour},
		FairShare: &limiter.FairShare{By: "user_path"}}
	b, asked, a = fairDrive(t, budget, 100*time.Second, 250*time.Millisecond, 2*time.Second, 0, 4, limiter.Price{Input: 10_000_000})
	t.Logf("budget of 100 requests: b %d of %d, a %d", b, asked, a)
	if a+b != 100 || b == 0 {
		t.Fatalf("budget: b got %d of %d in, a %d; want the whole budget spent, b's asks in while it lasted", b, asked, a)
	}
}

// twoInstances returns two limiters with rule over one store: two gateway
// instances.
func twoInstances(t *testing.T, rule limiter.Rule) []*limiter.Limiter {
	t.Helper()
	store := memstore.New()
	var ls []*limiter.Limiter
	for range 2 {
		rs, err := limiter.NewRules([]limiter.Rule{rule})
		if err != nil {
			t.Fatal(err)
		}
		l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
		ls = append(ls, l)
	}
	return ls
}

// failingReads is a store whose reads (and roster reads) fail while down
// is set: a store blip during fair-share refreshes.
type failingReads struct {
	*memstore.Store
	down bool
}

func (f *failingReads) Read(ctx context.Context, now time.Time, cs []limiter.Charge) ([]limiter.State, error) {
	if f.down {
		return nil, limiter.ErrStoreUnavailable
	}
	return f.Store.Read(ctx, now, cs)
}

func (f *failingReads) Roster(ctx context.Context, rule string, windows []int64) ([]string, error) {
	if f.down {
		return nil, limiter.ErrStoreUnavailable
	}
	return f.Store.Roster(ctx, rule, windows)
}

// A store that cannot answer the fair-share reads costs fairness, never
// the limit: admissions go on through the rule's own conditional charge,
// and never more than 60 pass in a window of 60.
func TestFairShareStoreBlipKeepsTheLimit(t *testing.T) {
	store := &failingReads{Store: memstore.New()}
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, Fixed: true, MaxRequests: 60},
		FairShare: &limiter.FairShare{By: "user_path"}}
	rs, _ := limiter.NewRules([]limiter.Rule{rule})
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	admitted := 0
	for i := range 400 {
		store.down = i%3 != 0 // most refreshes fail
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if now.Sub(t0) >= time.Minute {
			break
		}
		path := []string{"/t/a", "/t/b"}[i%2]
		d, err := l.Admit(context.Background(), now, limiter.Request{ID: fmt.Sprint("blip", i),
			Subject: limiter.Subject{UserPath: path, Provider: "openai", Model: "m"}})
		if err != nil {
			t.Fatalf("a failed fair-share read failed the admission: %v", err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 60 {
		t.Fatalf("%d admitted in a fixed window of 60", admitted)
	}
}

// Members are whatever clients send: 10,000 one-shot members (a fresh tag
// value each) on a rule at 1 % of its limit are all admitted, and a
// regular member after them too. Nobody is backlogged, so nobody is
// refused for fairness.
func TestFairShareInventedMembersRefuseNothing(t *testing.T) {
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1_000_000},
		FairShare: &limiter.FairShare{By: "tag:user"}}
	ls := twoInstances(t, rule)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	ask := func(i int, now time.Time, user string) bool {
		d, err := ls[i%2].Admit(context.Background(), now, limiter.Request{ID: fmt.Sprint("inv", i),
			Subject: limiter.Subject{Provider: "openai", Model: "m", Tags: []limiter.Tag{{Name: "user", Value: user}}}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	for i := range 10_000 {
		if !ask(i, t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprint("invented-", i)) {
			t.Fatalf("one-shot member %d refused on a rule at 1 %% of its limit", i)
		}
	}
	for i := range 200 {
		if !ask(10_000+i, t0.Add(10*time.Second+time.Duration(i)*time.Millisecond), "regular") {
			t.Fatalf("the regular member's request %d refused after 10,000 invented members", i)
		}
	}
}

// A member that asked once and went quiet strands nothing: with 20
// requests per 10 s shared by tag, b asks once, then a floods the window:
// a gets the other 19 (at least 17), where holding b's share would leave a
// 9 of them.
func TestFairShareStrandsNothing(t *testing.T) {
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: 10 * time.Second, Fixed: true, MaxRequests: 20},
		FairShare: &limiter.FairShare{By: "tag:user"}}
	ls := twoInstances(t, rule)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	n := 0
	ask := func(now time.Time, user string) bool {
		n++
		d, err := ls[n%2].Admit(context.Background(), now, limiter.Request{ID: fmt.Sprint("s", n),
			Subject: limiter.Subject{Provider: "openai", Model: "m", Tags: []limiter.Tag{{Name: "user", Value: user}}}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	if !ask(t0, "b") {
		t.Fatal("b's one request refused")
	}
	a := 0
	for i := range 99 { // a floods through the window, 10 a second
		if ask(t0.Add(100*time.Millisecond+time.Duration(i)*100*time.Millisecond), "a") {
			a++
		}
	}
	if a < 17 || a > 19 {
		t.Fatalf("a got %d of the 19 b left; want at least 17 (and the limit exact)", a)
	}
}

// Admission on a fair-share rule costs the same whatever the number of
// members ever seen: each iteration asks as a new member, out of 10, 1,000
// or 100,000 (within 2× of 10, in `make bench`).
func BenchmarkFairShareMembers(b *testing.B) {
	for _, members := range []int{10, 1_000, 100_000} {
		b.Run(fmt.Sprint(members), func(b *testing.B) {
			rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1 << 40},
				FairShare: &limiter.FairShare{By: "tag:user"}}
			rs, _ := limiter.NewRules([]limiter.Rule{rule})
			l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
			t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			names := make([]string, members)
			for i := range names {
				names[i] = fmt.Sprint("member-", i)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				_, err := l.Admit(context.Background(), t0.Add(time.Duration(i)*time.Microsecond), limiter.Request{ID: "bench",
					Subject: limiter.Subject{Provider: "openai", Model: "m", Tags: []limiter.Tag{{Name: "user", Value: names[i%members]}}}})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
