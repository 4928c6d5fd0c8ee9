package limiter_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
)

// benchRules returns 1,000 rules of which exactly 5 match a request from
// /team/app to openai/gpt-4o.
func benchRules(withTokens bool) []limiter.Rule {
	var tok int64
	if withTokens {
		tok = 1 << 50
	}
	const big = 1 << 50
	rules := []limiter.Rule{
		userRule("/", limiter.Minute, big, 0),
		userRule("/team", limiter.Minute, big, tok),
		{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: limiter.Hour, MaxRequests: big}},
		{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: big}},
		{Scope: limiter.ScopeModel, Subject: "openai/gpt-4o", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: big, MaxTokens: tok}},
	}
	for i := len(rules); i < 1000; i++ {
		s := strconv.Itoa(i)
		switch i % 4 {
		case 0:
			rules = append(rules, userRule("/tenant-"+s, limiter.Minute, 10, 0))
		case 1:
			rules = append(rules, userRule("/team/app-"+s, limiter.Hour, 10, 100))
		case 2:
			rules = append(rules, limiter.Rule{Scope: limiter.ScopeProvider, Subject: "provider-" + s, Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 10}})
		case 3:
			rules = append(rules, limiter.Rule{Scope: limiter.ScopeModel, Subject: "openai/model-" + s, Limit: limiter.Window{Period: limiter.Minute, MaxTokens: 10}})
		}
	}
	return rules
}

func benchmarkDecision(b *testing.B, withTokens bool) {
	rs, err := limiter.NewRules(benchRules(withTokens))
	if err != nil {
		b.Fatal(err)
	}
	store := memstore.New()
	l, err := limiter.New(limiter.Config{Store: store, Rules: rs})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// Ids come round again only long after their lease completed. (Not
	// one per iteration: a million of them would be most of the heap
	// the collector scans, and measure it rather than the decision.)
	ids := make([]string, 1<<12)
	for i := range ids {
		ids[i] = fmt.Sprintf("req-%d", i)
	}
	req := limiter.Request{
		Subject:      limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
		InputTokens:  100,
		OutputTokens: 50,
	}
	now := t0
	matched := 0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req.ID = ids[i%len(ids)]
		i++
		d, err := l.Admit(ctx, now, req)
		if err != nil || !d.Allowed {
			b.Fatal(err, d.Refused)
		}
		if d.Lease != nil {
			matched = len(d.Lease.Charges)
			if err := l.Complete(ctx, now, d.Lease, limiter.Usage{}); err != nil {
				b.Fatal(err)
			}
			if i%4096 == 0 { // what the reconciler does as it goes
				store.Trim(uint64(i))
			}
		}
		now = now.Add(time.Microsecond)
	}
	if withTokens && matched != 7 {
		b.Fatalf("%d counters charged, want 7 (5 rules)", matched)
	}
}

// BenchmarkDecision is one admission with 1,000 rules configured and 5
// matching, request windows only.
func BenchmarkDecision(b *testing.B) { benchmarkDecision(b, false) }

// BenchmarkDecisionWithTokens adds token windows, so each decision also
// records a lease, which the loop completes.
func BenchmarkDecisionWithTokens(b *testing.B) { benchmarkDecision(b, true) }
