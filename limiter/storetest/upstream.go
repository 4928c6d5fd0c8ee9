package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// upstreamStore is what a store that keeps upstream reports offers.
type upstreamStore interface {
	RecordUpstream(ctx context.Context, key string, rep limiter.UpstreamReport, every time.Duration) (bool, error)
	UpstreamReports(ctx context.Context, keys []string) (map[string]limiter.UpstreamReport, error)
}

// testUpstreamReportsAtMostEvery: a provider's model is reported at most
// once per interval by the whole fleet, however many instances write at
// once, and every instance reads what was written (case folded).
func testUpstreamReportsAtMostEvery(t *testing.T, open Opener) {
	ctx := context.Background()
	stores := make([]upstreamStore, 4)
	for i := range stores {
		s, ok := open().(upstreamStore)
		if !ok {
			t.Skip("the store keeps no upstream reports")
		}
		stores[i] = s
	}
	var wrote atomic.Int64
	for step := range 3 {
		at := T0.Add(time.Duration(step) * 2 * time.Second) // 0, 2, 4 s: one interval of 5 s
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				rep := limiter.UpstreamReport{LimitRequests: 50 + int64(i), LimitTokens: 40_000, RemainingRequests: 49, RemainingTokens: -1, At: at}
				ok, err := s.RecordUpstream(ctx, "OpenAI/gpt-4o", rep, limiter.UpstreamReportEvery)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wrote.Add(1)
				}
			})
		}
		wg.Wait()
	}
	if n := wrote.Load(); n != 1 {
		t.Fatalf("%d writes in one interval by 4 instances, want 1", n)
	}
	got, err := stores[3].UpstreamReports(ctx, []string{"openai/gpt-4o", "openai/none"})
	if err != nil {
		t.Fatal(err)
	}
	rep, ok := got["openai/gpt-4o"]
	if len(got) != 1 || !ok || rep.LimitTokens != 40_000 || rep.RemainingTokens != -1 || !rep.At.Equal(T0) || rep.LimitRequests < 50 {
		t.Fatalf("read %+v", got)
	}
	ok, err = stores[0].RecordUpstream(ctx, "openai/gpt-4o", limiter.UpstreamReport{LimitRequests: 10, At: T0.Add(5 * time.Second)}, limiter.UpstreamReportEvery)
	if err != nil || !ok {
		t.Fatalf("a report an interval later was not written: %v %v", ok, err)
	}
	if got, _ := stores[1].UpstreamReports(ctx, []string{"openai/gpt-4o"}); got["openai/gpt-4o"].LimitRequests != 10 {
		t.Fatalf("the later report is not read: %+v", got)
	}
}
