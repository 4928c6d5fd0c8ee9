package memstore

import (
	"context"
	"time"
)

// AddMinuteStats adds counts to kind's counts of the minute.
func (s *Store) AddMinuteStats(_ context.Context, kind string, minute time.Time, counts map[string]float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stats == nil {
		s.stats = map[string]map[int64]map[string]float64{}
	}
	if s.stats[kind] == nil {
		s.stats[kind] = map[int64]map[string]float64{}
	}
	m := minute.Unix() / 60
	for k := range s.stats[kind] {
		if k < m-24*60 {
			delete(s.stats[kind], k) // a day, as DynamoDB's TTL
		}
	}
	if s.stats[kind][m] == nil {
		s.stats[kind][m] = map[string]float64{}
	}
	for name, v := range counts {
		s.stats[kind][m][name] += v
	}
	return nil
}

// MinuteStats reads kind's counts for the minutes given.
func (s *Store) MinuteStats(_ context.Context, kind string, minutes []time.Time) (map[time.Time]map[string]float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[time.Time]map[string]float64{}
	for _, m := range minutes {
		if c := s.stats[kind][m.Unix()/60]; c != nil {
			cp := make(map[string]float64, len(c))
			for k, v := range c {
				cp[k] = v
			}
			out[m] = cp
		}
	}
	return out, nil
}
