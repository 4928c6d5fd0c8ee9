package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkReconcile10k measures one reconciler run over the stream
// records of 10,000 completed requests on DynamoDB Local: records read,
// settled exactly once and checkpointed per second. Each iteration makes
// 10,000 fresh requests (untimed) on fresh tables.
func BenchmarkReconcile10k(b *testing.B) {
	const n = 10000
	rules := []limiter.Rule{
		{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxTokens: 1 << 40}},
		{Scope: limiter.ScopeModel, Subject: "openai/gpt-4o", Limit: limiter.Window{Period: time.Minute, MaxInputTokens: 1 << 40, MaxOutputTokens: 1 << 40}},
	}
	var total time.Duration
	records := 0
	for b.Loop() {
		b.StopTimer()
		f := newReconcileFixture(b, rules...)
		now := time.Now().Truncate(time.Minute)
		completeMany(b, f, now, n)
		rc := f.reconciler(b, func() time.Time { return now })
		b.StartTimer()
		start := time.Now()
		rep, err := rc.Run(context.Background())
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Settled != n {
			b.Fatalf("settled %d of %d", rep.Settled, n)
		}
		records += rep.Read
	}
	b.ReportMetric(float64(records)/total.Seconds(), "records/s")
	b.ReportMetric(total.Seconds()/float64(b.N), "s/10k")
}

// completeMany admits and completes n requests with 16 workers.
func completeMany(b *testing.B, f *reconcileFixture, now time.Time, n int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				d, err := f.limiter.Admit(ctx, now, limiter.Request{
					ID:      fmt.Sprintf("bench-%d", i),
					Subject: limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
					Route:   "chat", InputTokens: 100, OutputTokens: 300,
				})
				if err != nil || !d.Allowed {
					b.Error(err)
					return
				}
				if err := f.limiter.Complete(ctx, now, d.Lease, limiter.Usage{InputTokens: 90 + int64(i%20), OutputTokens: int64(i % 400), Exact: true}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}
