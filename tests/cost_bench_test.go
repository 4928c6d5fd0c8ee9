package tests

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkRequestCost counts what one request costs in DynamoDB capacity
// over its whole life, on DynamoDB Local, with the rules of the cost example
// (docs/operations/cost.md): a team with requests and tokens per minute and a
// concurrency limit, and a provider with requests and tokens per minute
// (five counters, one of them a slot). Phases:
//
//	admit    charging the counters (the slot is one of them)
//	complete giving the slot back and writing the lease's record
//	settle   the reconciler correcting the token reservations
//
// Two cases: in-flight-1, each request completed before the next (the
// team's concurrency rule of 50 holds one slot); at-limit-200, a
// concurrency rule of 200 with its 199 other slots held throughout, so
// every slot write weighs a full gauge.
//
// Reported per request, for each phase and in total: WRU (the write
// request units AWS bills: standard writes, index writes, and 2 per
// transactional item), WCU (standard table writes), idxWCU (index
// writes), txItems (items written by transactions), RRU (read units AWS
// bills) and calls. docs/operations/cost.md turns these into dollars. ns/op
// is one whole iteration (n requests through the three phases), so the
// benchmark runs once.
func BenchmarkRequestCost(b *testing.B) {
	b.Run("in-flight-1", func(b *testing.B) { benchmarkRequestCost(b, costRules(50), 0) })
	b.Run("at-limit-200", func(b *testing.B) { benchmarkRequestCost(b, costRules(200), 199) })
}

func benchmarkRequestCost(b *testing.B, rules []limiter.Rule, held int) {
	const n = 2000
	var admit, complete, settle dynamostore.Stats
	for b.Loop() {
		f := newReconcileFixture(b, rules...)
		now := time.Now().Truncate(time.Minute)
		ctx := context.Background()
		req := func(id string) limiter.Request {
			return limiter.Request{
				ID:      id,
				Subject: limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
				Route:   "chat", InputTokens: 100, OutputTokens: 300,
			}
		}
		// The other requests in flight, holding their slots throughout.
		for i := range held {
			if d, err := f.limiter.Admit(ctx, now, req("held-"+strconv.Itoa(i))); err != nil || !d.Allowed {
				b.Fatal(err, d.Refused)
			}
		}
		for i := range n {
			s := f.store.Stats()
			d, err := f.limiter.Admit(ctx, now, req("cost-"+strconv.Itoa(i)))
			if err != nil || !d.Allowed {
				b.Fatal(err, d.Refused)
			}
			s2 := f.store.Stats()
			admit = addStats(admit, subStats(s2, s))
			if err := f.limiter.Complete(ctx, now, d.Lease, limiter.Usage{InputTokens: 90 + int64(i%20), OutputTokens: int64(i % 400), Exact: true}); err != nil {
				b.Fatal(err)
			}
			complete = addStats(complete, subStats(f.store.Stats(), s2))
		}
		s := f.store.Stats()
		rep, err := f.reconciler(b, func() time.Time { return now }).Run(ctx)
		if err != nil || rep.Completed != n || rep.Duplicates != 0 {
			b.Fatalf("reconciled %d of %d (%d duplicates): %v", rep.Completed, n, rep.Duplicates, err)
		}
		settle = addStats(settle, subStats(f.store.Stats(), s))
	}
	per := float64(n * b.N)
	report := func(phase string, s dynamostore.Stats) {
		b.ReportMetric(s.BilledWRU()/per, phase+"-WRU/req")
		b.ReportMetric(s.WCU/per, phase+"-WCU/req")
		b.ReportMetric(s.IndexWCU/per, phase+"-idxWCU/req")
		b.ReportMetric(float64(s.TransactItems)/per, phase+"-txItems/req")
		b.ReportMetric(s.BilledRRU()/per, phase+"-RRU/req")
		b.ReportMetric(float64(s.RoundTrips)/per, phase+"-calls/req")
	}
	report("admit", admit)
	report("complete", complete)
	report("settle", settle)
	total := addStats(addStats(admit, complete), settle)
	report("total", total)
	b.ReportMetric(total.BilledWRU()/per, "billed-WRU/req")
	b.ReportMetric(total.BilledRRU()/per, "billed-RRU/req")
}

// BenchmarkRequestStoreTime measures the time the gateway's Lambda spends
// in the store per request, on top of the upstream call: admission before
// it, completion after it. Same rules as BenchmarkRequestCost, with a
// simulated 5 ms network round trip added to every DynamoDB call (the
// regime of a Lambda calling DynamoDB in its region). Reports p50 and p99
// of admission, completion and their sum, in milliseconds (ns/op is one
// whole iteration of 200 requests).
func BenchmarkRequestStoreTime(b *testing.B) {
	rules := costRules(50)
	const rtt = 5 * time.Millisecond
	var admit, complete, both []time.Duration
	for b.Loop() {
		db := dynamotest.Client(b, dynamostore.ClientOptions{HTTPClient: dynamotest.Distant(rtt)})
		store, err := dynamostore.New(dynamostore.Options{API: db, TablePrefix: dynamotest.Prefix(b)})
		if err != nil {
			b.Fatal(err)
		}
		rs, err := limiter.NewRules(rules)
		if err != nil {
			b.Fatal(err)
		}
		l, err := limiter.New(limiter.Config{Store: store, Rules: rs})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		now := time.Now().Truncate(time.Minute)
		for i := range 200 {
			start := time.Now()
			d, err := l.Admit(ctx, now, limiter.Request{
				ID:      "time-" + strconv.Itoa(i),
				Subject: limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
				Route:   "chat", InputTokens: 100, OutputTokens: 300,
			})
			if err != nil || !d.Allowed {
				b.Fatal(err, d.Refused)
			}
			mid := time.Now()
			if err := l.Complete(ctx, now, d.Lease, limiter.Usage{InputTokens: 95, OutputTokens: 120, Exact: true}); err != nil {
				b.Fatal(err)
			}
			end := time.Now()
			if i > 0 { // the first reads the previous windows
				admit = append(admit, mid.Sub(start))
				complete = append(complete, end.Sub(mid))
				both = append(both, end.Sub(start))
			}
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(pct(admit, 0.5)), "admit-p50-ms")
	b.ReportMetric(ms(pct(admit, 0.99)), "admit-p99-ms")
	b.ReportMetric(ms(pct(complete, 0.5)), "complete-p50-ms")
	b.ReportMetric(ms(pct(complete, 0.99)), "complete-p99-ms")
	b.ReportMetric(ms(pct(both, 0.5)), "store-p50-ms")
	b.ReportMetric(ms(pct(both, 0.99)), "store-p99-ms")
}

// costRules are the cost example's rules, the team's concurrency limit
// being concurrent.
func costRules(concurrent int64) []limiter.Rule {
	return []limiter.Rule{
		{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1 << 30, MaxTokens: 1 << 40}},
		{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Gauge{MaxInFlight: concurrent}},
		{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1 << 30, MaxTokens: 1 << 40}},
	}
}

func subStats(a, b dynamostore.Stats) dynamostore.Stats {
	return dynamostore.Stats{
		RoundTrips: a.RoundTrips - b.RoundTrips, WCU: a.WCU - b.WCU, IndexWCU: a.IndexWCU - b.IndexWCU,
		RCU: a.RCU - b.RCU, ItemReads: a.ItemReads - b.ItemReads, TransactItems: a.TransactItems - b.TransactItems,
		EventualItemReads: a.EventualItemReads - b.EventualItemReads,
	}
}

func addStats(a, b dynamostore.Stats) dynamostore.Stats {
	return dynamostore.Stats{
		RoundTrips: a.RoundTrips + b.RoundTrips, WCU: a.WCU + b.WCU, IndexWCU: a.IndexWCU + b.IndexWCU,
		RCU: a.RCU + b.RCU, ItemReads: a.ItemReads + b.ItemReads, TransactItems: a.TransactItems + b.TransactItems,
		EventualItemReads: a.EventualItemReads + b.EventualItemReads,
	}
}
