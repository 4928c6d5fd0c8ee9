package metrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingStats is a StatsStore that keeps what it is given.
type recordingStats struct {
	mu     sync.Mutex
	writes int
	sum    map[string]float64
	byKind map[string]map[string]float64
}

func (r *recordingStats) AddMinuteStats(_ context.Context, kind string, _ time.Time, counts map[string]float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if kind == StatsRefused {
		r.writes++
	}
	if r.byKind == nil {
		r.byKind = map[string]map[string]float64{}
	}
	if r.byKind[kind] == nil {
		r.byKind[kind] = map[string]float64{}
	}
	for k, v := range counts {
		if kind == StatsRefused {
			r.sum[k] += v
		}
		r.byKind[kind][k] += v
	}
	return nil
}

func (r *recordingStats) SetStats(context.Context, string, time.Time, map[string]float64) error {
	return nil
}

func (r *recordingStats) ReadStats(context.Context, []StatsKey) (map[StatsKey]map[string]float64, error) {
	return nil, nil
}

func (r *recordingStats) MinuteStats(context.Context, string, []time.Time) (map[time.Time]map[string]float64, error) {
	return nil, nil
}

func (r *recordingStats) snapshot() (int, float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes, r.sum["rule"]
}

// A burst of refusals that stops is written in full: the first at once,
// the rest by the timer FlushEvery later, in two writes rather than one
// per refusal, and nothing is left pending.
func TestStatsWriteABurstThatStops(t *testing.T) {
	rec := &recordingStats{sum: map[string]float64{}}
	s := &Stats{Store: rec, FlushEvery: 50 * time.Millisecond}
	for range 100 {
		s.Count(Refused, 1, "Rule", "rule", "Reason", "rate_limit")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, n := rec.snapshot(); n == 100 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	writes, n := rec.snapshot()
	if n != 100 || writes > 3 {
		t.Fatalf("written %v refusals in %d writes, want 100 in at most 3", n, writes)
	}
	s.Flush(context.Background())
	if w, _ := rec.snapshot(); w != writes {
		t.Fatalf("a flush after everything was written wrote again (%d writes, then %d)", writes, w)
	}
}

// What clients choose is bounded: a flood of user paths and models is
// written as the TopNames largest of each and "(other)", and between
// writes at most MaxPendingNames names are kept per item.
func TestStatsBoundWhatClientsChoose(t *testing.T) {
	rec := &recordingStats{sum: map[string]float64{}}
	s := &Stats{Store: rec, FlushEvery: time.Hour}
	s.Flush(context.Background()) // the next counts wait for the hour
	for i := range 5000 {
		s.Completed(Completion{UserPath: fmt.Sprintf("/u/%d", i), InputTokens: int64(i), OutputTokens: 1})
		s.Outcome(Outcome{Kind: OutcomeRefused, Class: "batch", Model: fmt.Sprintf("m%d", i)})
	}
	s.mu.Lock()
	for k, p := range s.pending {
		if len(p) > MaxPendingNames+10 { // and a "(other)" per prefix
			t.Errorf("%s: %d names pending", k.kind, len(p))
		}
	}
	s.mu.Unlock()
	s.Flush(context.Background())
	ops := rec.byKind[StatsOps]
	count := map[string]int{}
	total := 0.0
	for name, v := range ops {
		prefix, _, _ := strings.Cut(name, ":")
		count[prefix]++
		if prefix == OpsRequests {
			total += v
		}
	}
	for _, p := range []string{OpsRequests, OpsInputTokens, OpsOutputTokens, "refused.model"} {
		if count[p] != TopNames+1 {
			t.Errorf("%s: %d names written, want %d and (other)", p, count[p], TopNames)
		}
	}
	if total != 5000 {
		t.Errorf("requests written add up to %v, want 5000: the bounds fold, never drop", total)
	}
	if ops["refused.class:batch"] != 5000 {
		t.Errorf("refusals by class %v", ops["refused.class:batch"])
	}
	// The largest of those tracked are the ones kept (past
	// MaxPendingNames, four a user, new users are folded at once).
	if _, ok := ops[OpsInputTokens+":/u/499"]; !ok {
		t.Errorf("the largest input tracked was not kept: %v", ops)
	}
}

func TestOutcomesAndCompletions(t *testing.T) {
	rec := &recordingStats{sum: map[string]float64{}}
	s := &Stats{Store: rec, FlushEvery: time.Hour}
	s.Flush(context.Background()) // the next counts wait for the hour
	s.Outcome(Outcome{Kind: OutcomeRefused, Class: "interactive", Model: "gpt-4o", Provider: "openai", Rule: "provider:openai:minute", ProviderRule: true, RetryAfter: 3 * time.Second, HasRetryAfter: true})
	s.Outcome(Outcome{Kind: OutcomeRefused, Class: "interactive", Model: "gpt-4o", Provider: "openai", Rule: "user_path:/a:minute", RetryAfter: 90 * time.Second, HasRetryAfter: true})
	s.Outcome(Outcome{Kind: OutcomeUpstream429, Model: "gpt-4o", Provider: "openai", RetryAfter: time.Second, HasRetryAfter: true})
	s.Outcome(Outcome{Kind: OutcomeWaited, Class: "batch", Model: "gpt-4o"})
	s.Completed(Completion{UserPath: "/a", Provider: "anthropic", InputTokens: 10, OutputTokens: 5, CacheHeadroom: 300,
		Rules: []RuleUse{{Rule: "user_path:/a:minute", Dimension: "tokens", Reserved: 110, Used: 15}}, Members: []MemberUse{{Rule: "provider:p:minute", Member: "/a", Units: 1}}})
	s.Count(Admitted, 1, "Route", "chat", "Provider", "openai")
	s.Count(UpstreamRateLimited, 1, "Provider", "openai")
	s.Count(Refused, 1, "Rule", "user_path:/a:minute", "Reason", "rate_limit")
	s.Flush(context.Background())
	ops, hour := rec.byKind[StatsOps], rec.byKind[StatsHour]
	for name, want := range map[string]float64{
		"refused.class:interactive": 2, "refused.model:gpt-4o": 2, "upstream_429.model:gpt-4o": 1, "waited.class:batch": 1,
		"bottleneck:openai|provider:openai:minute": 1, "bottleneck:openai|(upstream 429)": 1,
		"retry.local:openai|≤5s": 1, "retry.local:openai|>60s": 1, "retry.upstream:openai|≤1s": 1,
		"req:/a": 1, "in:/a": 10, "out:/a": 5, "cache:anthropic": 300, "fair:provider:p:minute|/a": 1,
		"admitted:openai": 1, "upstream429:openai": 1,
	} {
		if ops[name] != want {
			t.Errorf("ops %s: %v, want %v", name, ops[name], want)
		}
	}
	if _, ok := ops["bottleneck:openai|user_path:/a:minute"]; ok {
		t.Error("a user path's rule counted as a provider's bottleneck")
	}
	for name, want := range map[string]float64{
		"reserved:user_path:/a:minute|tokens": 110, "used:user_path:/a:minute|tokens": 15, "stranded:user_path:/a:minute|tokens": 95,
		"refused:user_path:/a:minute": 1, "admitted:openai": 1, "upstream429:openai": 1,
	} {
		if hour[name] != want {
			t.Errorf("hour %s: %v, want %v", name, hour[name], want)
		}
	}
}
