package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
)

// The DynamoDB benchmarks run on the engine `make bench` starts, each
// twice: against the engine as it is ("local", where DynamoDB Local's JVM
// and the client share this machine's two cores, so parallel calls queue
// for CPU), and with a simulated 5 ms network round trip added to every
// call ("rtt5ms", the regime of a Lambda calling DynamoDB, where latency
// is the network's and parallel calls overlap). Besides ns/op and
// allocs/op they report:
//
//	p50-µs, p99-µs   latency percentiles of one operation
//	raw-p50-µs       p50 of one raw conditional UpdateItem on the same
//	                 engine, table and client, measured in the same run
//	p50-ratio        p50 / raw-p50 (target ≤ 1.3: one round trip)
//	par-raw-p50-µs   p50 of as many raw UpdateItems as the operation makes,
//	                 issued in parallel
//	par-ratio        p50 / par-raw-p50: what the store adds to one round
//	calls/op         DynamoDB API calls per operation
//	WCU/op           table write capacity per admitted request, and
//	idxWCU/op        index write capacity (tollgate's tables have no
//	                 index any more: 0)

var rtts = []struct {
	name string
	rtt  time.Duration
}{{"local", 0}, {"rtt5ms", 5 * time.Millisecond}}

func benchClient(b *testing.B, rtt time.Duration) *dynamodb.Client {
	o := dynamostore.ClientOptions{}
	if rtt > 0 {
		o.HTTPClient = dynamotest.Distant(rtt)
	}
	return dynamotest.Client(b, o)
}

type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func micro(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// rawCondUpdate is the baseline: one conditional ADD, as a hand-written
// limiter would do it.
func rawCondUpdate(ctx context.Context, api *dynamodb.Client, table, key string) error {
	_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
		UpdateExpression:                    aws.String("ADD #n :a"),
		ConditionExpression:                 aws.String("attribute_not_exists(#n) OR #n <= :m"),
		ExpressionAttributeNames:            map[string]string{"#n": "n"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":a": &types.AttributeValueMemberN{Value: "1"}, ":m": &types.AttributeValueMemberN{Value: "1000000000"}},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return err
}

// rawP50 measures the median of k raw calls issued at once, n times.
func rawP50(b *testing.B, api *dynamodb.Client, table string, k, n int) time.Duration {
	ctx := context.Background()
	lat := make(latencies, 0, n)
	errs := make([]error, k)
	for range n {
		start := time.Now()
		var wg sync.WaitGroup
		for j := range k {
			wg.Go(func() { errs[j] = rawCondUpdate(ctx, api, table, fmt.Sprintf("raw-%d", j)) })
		}
		wg.Wait()
		lat = append(lat, time.Since(start))
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
	return lat.pct(0.5)
}

func samples(rtt time.Duration) int {
	if rtt > 0 {
		return 60
	}
	return 300
}

func BenchmarkRawConditionalUpdate(b *testing.B) {
	for _, r := range rtts {
		b.Run(r.name, func(b *testing.B) {
			prefix := dynamotest.Prefix(b)
			api := benchClient(b, r.rtt)
			table := prefix + dynamostore.SuffixCounters
			ctx := context.Background()
			lat := latencies{}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				start := time.Now()
				if err := rawCondUpdate(ctx, api, table, fmt.Sprintf("raw-%d", i%8)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				i++
			}
			b.ReportMetric(micro(lat.pct(0.5)), "p50-µs")
			b.ReportMetric(micro(lat.pct(0.99)), "p99-µs")
		})
	}
}

const huge = 1 << 50

// BenchmarkAdmission admits requests through the limiter and the DynamoDB
// store: one request-window rule; a user-path, a provider and a model
// rule; and those three with a token window and a concurrency slot (no
// lease is written at admission: its record is written at completion).
func BenchmarkAdmission(b *testing.B) {
	cases := []struct {
		name  string
		calls int
		rules []limiter.Rule
	}{
		{"1rule", 1, []limiter.Rule{
			{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxRequests: huge}},
		}},
		{"3rules", 3, []limiter.Rule{
			{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxRequests: huge}},
			{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: huge}},
			{Scope: limiter.ScopeModel, Subject: "openai/gpt-4o", Limit: limiter.Window{Period: time.Hour, MaxRequests: huge}},
		}},
		// A budget and three windows: four counters in one round.
		{"3rules+budget", 4, []limiter.Rule{
			{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxRequests: huge}},
			{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Minute, MaxRequests: huge}},
			{Scope: limiter.ScopeModel, Subject: "openai/gpt-4o", Limit: limiter.Window{Period: time.Hour, MaxRequests: huge}},
			{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Budget{MaxCost: huge, Calendar: limiter.CalendarMonth}},
		}},
		// A token bucket of requests: one conditional write, on the side
		// its last value says.
		{"bucket", 1, []limiter.Rule{
			{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Bucket{Capacity: 1e9, RefillPerSecond: 1e6}},
		}},
		{"3rules+tokens+slot", 4, []limiter.Rule{
			{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxRequests: huge, MaxTokens: huge}},
			{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Gauge{MaxInFlight: limiter.MaxSlotsPerShard}},
			{Scope: limiter.ScopeModel, Subject: "openai/gpt-4o", Limit: limiter.Window{Period: time.Hour, MaxRequests: huge}},
		}},
	}
	for _, c := range cases {
		for _, r := range rtts {
			b.Run(c.name+"/"+r.name, func(b *testing.B) { benchmarkAdmission(b, r.rtt, c.calls, c.rules, 0) })
		}
	}
	// A slot costs what its gauge item weighs, which grows with the slots
	// held: admissions at a concurrency rule's limit (the rule's other
	// slots all held), on one shard and on several.
	for _, c := range []struct {
		limit  int64
		shards int
	}{{10, 0}, {50, 0}, {200, 0}, {200, 8}} {
		rules := []limiter.Rule{{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Gauge{MaxInFlight: c.limit}, Shards: c.shards}}
		b.Run(fmt.Sprintf("slot-at-limit-%d-shards-%d/local", c.limit, max(c.shards, 1)), func(b *testing.B) {
			benchmarkAdmission(b, 0, 1, rules, c.limit-1)
		})
	}
}

// benchmarkAdmission measures admissions; each one's lease is completed
// after it (outside the measure), with held other slots held throughout.
func benchmarkAdmission(b *testing.B, rtt time.Duration, calls int, rules []limiter.Rule, held int64) {
	prefix := dynamotest.Prefix(b)
	api := benchClient(b, rtt)
	store, err := dynamostore.New(dynamostore.Options{API: api, TablePrefix: prefix})
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
	table := prefix + dynamostore.SuffixCounters
	raw := rawP50(b, api, table, 1, samples(rtt))
	par := rawP50(b, api, table, calls, samples(rtt))
	// The clock stays inside one window, so every admission after the
	// first finds the previous window's count cached: the steady state.
	now := time.Now().Truncate(time.Hour)
	req := limiter.Request{
		Subject:     limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
		InputTokens: 100, OutputTokens: 50,
		Price: limiter.Price{Input: 2_500_000, Output: 10_000_000, CachedInput: 1_250_000},
	}
	warm := req
	warm.ID = "warm"
	if d, err := l.Admit(ctx, now, warm); err != nil {
		b.Fatal(err)
	} else if err := l.Complete(ctx, now, d.Lease, limiter.Usage{}); err != nil {
		b.Fatal(err)
	}
	// The slots the others hold, on every shard: a slot's write weighs
	// its shard's entries.
	for i := range held {
		hold := req
		hold.ID = fmt.Sprintf("%0*d", len(fmt.Sprint(held)), i) // compact ids, as the gateway's leaseID makes
		hold.ID = fmt.Sprintf("aaaaaaaaaaaaaaa%s.0.0", hold.ID)[len(hold.ID):]
		if d, err := l.Admit(ctx, now, hold); err != nil || !d.Allowed {
			b.Fatal(err, d.Refused)
		}
	}
	var completeWCU float64
	var completeCalls int64
	before := store.Stats()
	lat := latencies{}
	var n atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		req.ID = fmt.Sprintf("bench-%d", n.Add(1))
		start := time.Now()
		d, err := l.Admit(ctx, now, req)
		if err != nil || !d.Allowed {
			b.Fatal(err, d.Refused)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		pre := store.Stats()
		if err := l.Complete(ctx, now, d.Lease, limiter.Usage{InputTokens: 100, OutputTokens: 50, Exact: true}); err != nil {
			b.Fatal(err)
		}
		completeWCU += store.Stats().WCU - pre.WCU
		completeCalls += store.Stats().RoundTrips - pre.RoundTrips
		b.StartTimer()
		now = now.Add(time.Microsecond)
	}
	after := store.Stats()
	after.WCU -= completeWCU
	after.RoundTrips -= completeCalls
	ops := float64(len(lat))
	b.ReportMetric(micro(lat.pct(0.5)), "p50-µs")
	b.ReportMetric(micro(lat.pct(0.99)), "p99-µs")
	b.ReportMetric(micro(raw), "raw-p50-µs")
	b.ReportMetric(float64(lat.pct(0.5))/float64(raw), "p50-ratio")
	b.ReportMetric(micro(par), "par-raw-p50-µs")
	b.ReportMetric(float64(lat.pct(0.5))/float64(par), "par-ratio")
	b.ReportMetric(float64(after.RoundTrips-before.RoundTrips)/ops, "calls/op")
	b.ReportMetric((after.WCU-before.WCU)/ops, "WCU/op")
	b.ReportMetric((after.IndexWCU-before.IndexWCU)/ops, "idxWCU/op")
	b.ReportMetric(completeWCU/ops, "complete-WCU/op")
}

// BenchmarkTransact3 is the alternative the store does not take: three
// conditional counter updates and the lease put as one TransactWriteItems.
// Compare with BenchmarkAdmission/3rules+tokens+slot. WCU/op is what AWS
// bills, 2 units per item of up to 1 KB; DynamoDB Local reports a flat 2
// per table per transaction (engine-WCU/op), whatever its size.
func BenchmarkTransact3(b *testing.B) {
	for _, r := range rtts {
		b.Run(r.name, func(b *testing.B) {
			prefix := dynamotest.Prefix(b)
			api := benchClient(b, r.rtt)
			counters, leases := prefix+dynamostore.SuffixCounters, prefix+dynamostore.SuffixLeases
			ctx := context.Background()
			raw := rawP50(b, api, counters, 1, samples(r.rtt))
			update := func(key string) types.TransactWriteItem {
				return types.TransactWriteItem{Update: &types.Update{
					TableName:                           aws.String(counters),
					Key:                                 map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
					UpdateExpression:                    aws.String("ADD #n :a"),
					ConditionExpression:                 aws.String("attribute_not_exists(#n) OR #n <= :m"),
					ExpressionAttributeNames:            map[string]string{"#n": "n"},
					ExpressionAttributeValues:           map[string]types.AttributeValue{":a": &types.AttributeValueMemberN{Value: "1"}, ":m": &types.AttributeValueMemberN{Value: "1000000000"}},
					ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
				}}
			}
			lat := latencies{}
			var wcu float64
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				items := []types.TransactWriteItem{update("tx-user"), update("tx-provider"), update("tx-model"), {Put: &types.Put{
					TableName: aws.String(leases),
					Item: map[string]types.AttributeValue{
						"id":     &types.AttributeValueMemberS{Value: fmt.Sprintf("tx-%d", i)},
						"status": &types.AttributeValueMemberS{Value: "active"},
					},
				}}}
				start := time.Now()
				out, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
					TransactItems: items, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
				})
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				for _, c := range out.ConsumedCapacity {
					if c.CapacityUnits != nil {
						wcu += *c.CapacityUnits
					}
				}
			}
			b.ReportMetric(micro(lat.pct(0.5)), "p50-µs")
			b.ReportMetric(micro(lat.pct(0.99)), "p99-µs")
			b.ReportMetric(micro(raw), "raw-p50-µs")
			b.ReportMetric(float64(lat.pct(0.5))/float64(raw), "p50-ratio")
			b.ReportMetric(1, "calls/op")
			b.ReportMetric(2*4, "WCU/op")
			b.ReportMetric(wcu/float64(len(lat)), "engine-WCU/op")
		})
	}
}
