package memstore

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

var _ limiter.Rosters = (*Store)(nil)

// JoinRoster implements limiter.Rosters. A rule keeps the rosters of its
// last few windows only.
func (s *Store) JoinRoster(_ context.Context, rule string, window int64, member string, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rosters == nil {
		s.rosters = map[string]map[int64]map[string]bool{}
	}
	byWindow := s.rosters[rule]
	if byWindow == nil {
		byWindow = map[int64]map[string]bool{}
		s.rosters[rule] = byWindow
	}
	for w := range byWindow {
		if w < window-2 {
			delete(byWindow, w)
		}
	}
	if byWindow[window] == nil {
		byWindow[window] = map[string]bool{}
	}
	byWindow[window][member] = true
	return nil
}

// Roster implements limiter.Rosters.
func (s *Store) Roster(_ context.Context, rule string, windows []int64) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, w := range windows {
		for m := range s.rosters[rule][w] {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out, nil
}
