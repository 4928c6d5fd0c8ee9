package metrics

import (
	"context"
	"sync"
	"testing"
	"time"
)

// recordingStats is a StatsStore that keeps what it is given.
type recordingStats struct {
	mu     sync.Mutex
	writes int
	sum    map[string]float64
}

func (r *recordingStats) AddMinuteStats(_ context.Context, _ string, _ time.Time, counts map[string]float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes++
	for k, v := range counts {
		r.sum[k] += v
	}
	return nil
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
