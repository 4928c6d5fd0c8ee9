package app

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/configstore"
)

// The judge of an interval on crafted counts: p95_latency_ratio is To's
// p95 over From's (bucket upper bounds), held above the threshold and not
// at it, never judged without latencies of both; a From at 0 ms counts
// as 1 ms; rollback_when is judged apart from hold_when; rates are of
// To's answers.
func TestMigrationJudge(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	judge := migrationJudge([]config.MigrationSpec{{Name: "mini",
		HoldWhen:     config.MigrationThresholds{Upstream429Rate: f(0.02), ErrorRate: f(0.01), P95LatencyRatio: f(1.5)},
		RollbackWhen: config.MigrationThresholds{ErrorRate: f(0.1), P95LatencyRatio: f(10)}}})
	latencies := func(to, from int64, n int) configstore.MigrationCounts {
		var c configstore.MigrationCounts
		for range n {
			if to >= 0 {
				c.ToLatency.Add(to)
			}
			if from >= 0 {
				c.FromLatency.Add(from)
			}
		}
		c.Answers = int64(n)
		return c
	}
	for _, tc := range []struct {
		what           string
		c              configstore.MigrationCounts
		hold, rollback string
	}{
		{"to at 20 ms, from at 5", latencies(20, 5, 40), "p95_latency_ratio 4.6 above 1.5 (p95 23 ms against 5 ms)", ""},
		{"to at 7 ms, from at 5: 7/5 below 1.5", latencies(7, 5, 40), "", ""},
		{"to at 8 ms, from at 5: 9/5 above 1.5", latencies(8, 5, 40), "p95_latency_ratio 1.8 above 1.5 (p95 9 ms against 5 ms)", ""},
		{"to at 100 ms, from at 5: past rollback_when too", latencies(100, 5, 40), "p95_latency_ratio 22.2",
			"p95_latency_ratio 22.2 above 10 (p95 111 ms against 5 ms)"},
		{"from at 0 ms counts as 1", latencies(3, 0, 40), "p95_latency_ratio 3 above 1.5 (p95 3 ms against 1 ms)", ""},
		{"no latency of from", latencies(500, -1, 40), "", ""},
		{"no latency of to", latencies(-1, 5, 40), "", ""},
		{"nothing counted", configstore.MigrationCounts{}, "", ""},
		{"3 of 100 answers 429", configstore.MigrationCounts{Answers: 100, RateLimited: 3}, "upstream_429_rate 0.03 above 0.02 (3 of 100 answers)", ""},
		{"2 of 200 answers 429: at 0.01", configstore.MigrationCounts{Answers: 200, RateLimited: 2}, "", ""},
		{"12 of 100 failed", configstore.MigrationCounts{Answers: 100, Errors: 12}, "error_rate 0.12 above 0.01 (12 of 100 answers)",
			"error_rate 0.12 above 0.1 (12 of 100 answers)"},
	} {
		hold, rollback := judge("mini", tc.c)
		if !strings.HasPrefix(hold, tc.hold) || (tc.hold == "") != (hold == "") || rollback != tc.rollback {
			t.Errorf("%s: hold %q, rollback %q; want %q, %q", tc.what, hold, rollback, tc.hold, tc.rollback)
		}
	}
	if hold, rollback := judge("unknown", latencies(100, 5, 40)); hold != "" || rollback != "" {
		t.Errorf("a migration without thresholds: %q, %q", hold, rollback)
	}
}
