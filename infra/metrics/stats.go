package metrics

import (
	"context"
	"sync"
	"time"
)

// StatsStore keeps the dashboard's per-minute counts where every instance
// adds to them and reads them.
type StatsStore interface {
	AddMinuteStats(ctx context.Context, kind string, minute time.Time, counts map[string]float64) error
	MinuteStats(ctx context.Context, kind string, minutes []time.Time) (map[time.Time]map[string]float64, error)
}

// The kinds of stats.
const (
	StatsRefused  = "refused"  // refusals by rule id
	StatsEstimate = "estimate" // "reserved:<route>" and "used:<route>" tokens
)

// Stats is a Sink that keeps refusals by rule, per minute, in a
// StatsStore, for GET /admin/stats: added up in process and written at
// most every FlushEvery (one write per kind and minute), so a flood of
// refusals costs no write each. The first count is written at once; what
// comes after is written FlushEvery after the last write, by a timer when
// no later count brings it, so a burst that stops is not left unwritten
// (TestStatsWriteABurstThatStops).
type Stats struct {
	Store      StatsStore
	Now        func() time.Time
	FlushEvery time.Duration // default 10 s

	mu       sync.Mutex
	pending  map[statsKey]map[string]float64
	flushed  time.Time
	flushing bool
	timer    *time.Timer // set while a flush is scheduled
}

type statsKey struct {
	kind   string
	minute time.Time
}

func (s *Stats) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Count implements Sink: refusals are kept by their rule.
func (s *Stats) Count(name string, n float64, dims ...string) {
	if name != Refused {
		return
	}
	for i := 0; i+1 < len(dims); i += 2 {
		if dims[i] == "Rule" {
			s.Add(StatsRefused, dims[i+1], n)
		}
	}
}

// Observe implements Sink; nothing observed is kept.
func (s *Stats) Observe(string, float64, string, ...string) {}

// Add counts n more of name in kind's current minute, and writes what is
// pending (in the background) when FlushEvery has passed since the last
// write, or schedules that write.
func (s *Stats) Add(kind, name string, n float64) {
	now := s.now()
	k := statsKey{kind, now.Truncate(time.Minute)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[statsKey]map[string]float64{}
	}
	if s.pending[k] == nil {
		s.pending[k] = map[string]float64{}
	}
	s.pending[k][name] += n
	s.scheduleLocked(now)
}

// Flush writes what is pending. A failed write is dropped: these are
// statistics.
func (s *Stats) Flush(ctx context.Context) {
	s.mu.Lock()
	if s.flushing {
		s.mu.Unlock()
		return
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	pending := s.pending
	s.pending, s.flushing, s.flushed = map[statsKey]map[string]float64{}, true, s.now()
	s.mu.Unlock()
	for k, counts := range pending {
		_ = s.Store.AddMinuteStats(ctx, k.kind, k.minute, counts)
	}
	s.mu.Lock()
	s.flushing = false
	if len(s.pending) > 0 { // counted while writing
		s.scheduleLocked(s.now())
	}
	s.mu.Unlock()
}

// scheduleLocked arranges the next write of what is pending: at once when
// FlushEvery has passed since the last, else by a timer for the rest.
func (s *Stats) scheduleLocked(now time.Time) {
	if s.flushing || s.timer != nil {
		return
	}
	every := s.FlushEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	wait := max(0, min(every, every-now.Sub(s.flushed)))
	s.timer = time.AfterFunc(wait, func() { s.Flush(context.Background()) })
}

// Multi sends every measurement to each sink.
type Multi []Sink

func (m Multi) Count(name string, n float64, dims ...string) {
	for _, s := range m {
		s.Count(name, n, dims...)
	}
}

func (m Multi) Observe(name string, v float64, unit string, dims ...string) {
	for _, s := range m {
		s.Observe(name, v, unit, dims...)
	}
}
