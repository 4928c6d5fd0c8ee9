// Package statstest is the behaviour every metrics.StatsStore shows, run
// against the embedded store and DynamoDB alike.
package statstest

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
)

// Run checks a store: counts add up across writers, samples are set
// (the last writer wins), kinds and periods are items of their own, any
// of them are read at once, and an item never written is absent.
func Run(t *testing.T, s metrics.StatsStore) {
	ctx := context.Background()
	// Near now: DynamoDB Local deletes items past their TTL.
	m0 := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	h0 := m0.Truncate(time.Hour)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.AddMinuteStats(ctx, metrics.StatsOps, m0, map[string]float64{"req:/a": 2, "in:/a": 100}))
	must(s.AddMinuteStats(ctx, metrics.StatsOps, m0, map[string]float64{"req:/a": 3, "req:/b": 1}))
	must(s.AddMinuteStats(ctx, metrics.StatsOps, m0.Add(time.Minute), map[string]float64{"req:/a": 7}))
	must(s.AddMinuteStats(ctx, metrics.StatsHour, h0, map[string]float64{"stranded:r": 84.5}))
	must(s.SetStats(ctx, metrics.StatsSpent, m0, map[string]float64{"budget:user_path:/a:month": 10}))
	must(s.SetStats(ctx, metrics.StatsSpent, m0, map[string]float64{"budget:user_path:/a:month": 12, "budget:user_path:/b:day": 1}))
	must(s.SetStats(ctx, metrics.StatsPeak, h0, map[string]float64{"r": 0.5}))
	must(s.SetStats(ctx, metrics.StatsPeak, h0, map[string]float64{"r": 0.75}))
	keys := []metrics.StatsKey{
		{Kind: metrics.StatsOps, At: m0}, {Kind: metrics.StatsOps, At: m0.Add(time.Minute)}, {Kind: metrics.StatsOps, At: m0.Add(2 * time.Minute)},
		{Kind: metrics.StatsHour, At: h0}, {Kind: metrics.StatsSpent, At: m0}, {Kind: metrics.StatsPeak, At: h0}, {Kind: metrics.StatsRefused, At: m0},
	}
	got, err := s.ReadStats(ctx, keys)
	must(err)
	check := func(k metrics.StatsKey, name string, want float64) {
		t.Helper()
		if v := got[k][name]; v != want {
			t.Errorf("%s at %v, %s: %v, want %v", k.Kind, k.At, name, v, want)
		}
	}
	check(keys[0], "req:/a", 5)
	check(keys[0], "req:/b", 1)
	check(keys[0], "in:/a", 100)
	check(keys[1], "req:/a", 7)
	check(keys[3], "stranded:r", 84.5)
	check(keys[4], "budget:user_path:/a:month", 12)
	check(keys[4], "budget:user_path:/b:day", 1)
	check(keys[5], "r", 0.75)
	if _, ok := got[keys[2]]; ok {
		t.Error("a minute never written was read")
	}
	if _, ok := got[keys[6]]; ok {
		t.Error("a kind never written was read")
	}
	if len(got) != 5 {
		t.Errorf("read %d items, want 5", len(got))
	}
	// MinuteStats reads one kind's periods.
	ms, err := s.MinuteStats(ctx, metrics.StatsOps, []time.Time{m0, m0.Add(time.Minute)})
	must(err)
	if ms[m0]["req:/a"] != 5 || ms[m0.Add(time.Minute)]["req:/a"] != 7 {
		t.Errorf("MinuteStats %v", ms)
	}
	// More keys than one batch holds.
	var many []metrics.StatsKey
	for i := range 130 {
		many = append(many, metrics.StatsKey{Kind: metrics.StatsEstimate, At: m0.Add(-time.Duration(i) * time.Minute)})
	}
	must(s.AddMinuteStats(ctx, metrics.StatsEstimate, many[129].At, map[string]float64{"used:chat": 1}))
	got, err = s.ReadStats(ctx, many)
	must(err)
	if len(got) != 1 || got[many[129]]["used:chat"] != 1 {
		t.Errorf("130 keys: %v", got)
	}
}
