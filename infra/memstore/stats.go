package memstore

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
)

// AddMinuteStats adds counts to kind's counts of the period at.
func (s *Store) AddMinuteStats(_ context.Context, kind string, at time.Time, counts map[string]float64) error {
	s.writeStats(kind, at, counts, true)
	return nil
}

// SetStats sets values in kind's counts of the period at.
func (s *Store) SetStats(_ context.Context, kind string, at time.Time, values map[string]float64) error {
	s.writeStats(kind, at, values, false)
	return nil
}

func (s *Store) writeStats(kind string, at time.Time, counts map[string]float64, add bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stats == nil {
		s.stats = map[string]map[int64]map[string]float64{}
	}
	if s.stats[kind] == nil {
		s.stats[kind] = map[int64]map[string]float64{}
	}
	m := at.Unix() / 60
	keep := int64(metrics.StatsRetention(kind) / time.Minute)
	for k := range s.stats[kind] {
		if k < m-keep {
			delete(s.stats[kind], k) // as DynamoDB's TTL
		}
	}
	if s.stats[kind][m] == nil {
		s.stats[kind][m] = map[string]float64{}
	}
	for name, v := range counts {
		if add {
			s.stats[kind][m][name] += v
		} else {
			s.stats[kind][m][name] = v
		}
	}
}

// MinuteStats reads kind's counts for the periods given.
func (s *Store) MinuteStats(ctx context.Context, kind string, minutes []time.Time) (map[time.Time]map[string]float64, error) {
	keys := make([]metrics.StatsKey, len(minutes))
	for i, m := range minutes {
		keys[i] = metrics.StatsKey{Kind: kind, At: m}
	}
	got, _ := s.ReadStats(ctx, keys)
	out := map[time.Time]map[string]float64{}
	for k, v := range got {
		out[k.At] = v
	}
	return out, nil
}

// ReadStats reads the counts of the keys given.
func (s *Store) ReadStats(_ context.Context, keys []metrics.StatsKey) (map[metrics.StatsKey]map[string]float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[metrics.StatsKey]map[string]float64{}
	for _, k := range keys {
		if c := s.stats[k.Kind][k.At.Unix()/60]; c != nil {
			cp := make(map[string]float64, len(c))
			for n, v := range c {
				cp[n] = v
			}
			out[k] = cp
		}
	}
	return out, nil
}
