package configstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/learn"
)

// Memory is the in-process store of a local process.
type Memory struct {
	mu         sync.Mutex
	rules      map[limiter.RuleKey]Rule
	gens       map[limiter.RuleKey]string
	layouts    map[limiter.RuleKey]Layout
	keys       map[string]Key // by hash
	batches    map[string]Batch
	sessions   map[string]Session
	pauses     map[string]limiter.Pause
	downgrades map[string]Downgrade
	ramps      map[limiter.RuleKey]limiter.RampState
	estimates  map[string]*learn.Histogram
	alerts     map[string]Alert
	audit      []AuditEntry // by ID, oldest first
	version    int64
	now        func() time.Time
	// migrations and their counts (see migrations.go).
	migrations      map[string]MigrationState
	migrationCounts map[string]*MigrationCounts
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory {
	return &Memory{rules: map[limiter.RuleKey]Rule{}, gens: map[limiter.RuleKey]string{}, layouts: map[limiter.RuleKey]Layout{},
		keys: map[string]Key{}, now: time.Now}
}

// Snapshot returns the rules, generations and version.
func (m *Memory) Snapshot(context.Context) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{Generations: map[limiter.RuleKey]string{}, Version: m.version}
	for _, r := range m.rules {
		s.Rules = append(s.Rules, r)
	}
	slices.SortFunc(s.Rules, func(a, b Rule) int { return strings.Compare(string(a.Key()), string(b.Key())) })
	for k, g := range m.gens {
		s.Generations[k] = g
	}
	s.Layouts = map[limiter.RuleKey]Layout{}
	for k, l := range m.layouts {
		s.Layouts[k] = l
	}
	for _, p := range m.pauses {
		s.Pauses = append(s.Pauses, p)
	}
	s.Ramps = map[limiter.RuleKey]limiter.RampState{}
	for k, r := range m.ramps {
		s.Ramps[k] = r
	}
	s.Migrations = map[string]MigrationState{}
	for k, st := range m.migrations {
		s.Migrations[k] = st
	}
	sortPauses(s.Pauses)
	for _, d := range m.downgrades {
		d.Classes = slices.Clone(d.Classes)
		s.Downgrades = append(s.Downgrades, d)
	}
	sortDowngrades(s.Downgrades)
	return s, nil
}

// SetLayout implements Layouts.
func (m *Memory) SetLayout(_ context.Context, k limiter.RuleKey, l Layout, version int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.layouts[k].Version != version {
		return ErrLayoutChanged
	}
	l.Version = version + 1
	m.layouts[k] = l
	m.version++
	return nil
}

// Version returns the store's version.
func (m *Memory) Version(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// PutRule creates r (version 0) or updates the rule at from to r, if it is
// still at version. Moving a rule (a new key) gives it new counters.
func (m *Memory) PutRule(_ context.Context, r Rule, from limiter.RuleKey, version int64) (Rule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	key := r.Key()
	if version == 0 {
		if cur, ok := m.rules[key]; ok {
			return Rule{}, &ConflictError{Current: cur}
		}
		r.Version, r.CreatedAt, r.UpdatedAt = 1, now, now
		m.rules[key] = r
		m.gens[key] = NewGeneration()
		m.version++
		return r, nil
	}
	cur, ok := m.rules[from]
	if !ok {
		return Rule{}, ErrNotFound
	}
	if cur.Version != version {
		return Rule{}, &ConflictError{Current: cur}
	}
	if key != from {
		if other, taken := m.rules[key]; taken {
			return Rule{}, &ConflictError{Current: other}
		}
		delete(m.rules, from)
		m.gens[key] = NewGeneration()
	}
	r.Version, r.CreatedAt, r.UpdatedAt = cur.Version+1, cur.CreatedAt, now
	m.rules[key] = r
	m.version++
	return r, nil
}

// DeleteRule deletes a rule, if at version (0: any).
func (m *Memory) DeleteRule(_ context.Context, key limiter.RuleKey, version int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.rules[key]
	if !ok {
		return ErrNotFound
	}
	if version != 0 && cur.Version != version {
		return &ConflictError{Current: cur}
	}
	delete(m.rules, key)
	m.version++
	return nil
}

// Regenerate starts new counters for the rules with the given keys.
func (m *Memory) Regenerate(_ context.Context, keys []limiter.RuleKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		m.gens[k] = NewGeneration()
	}
	m.version++
	return nil
}

// PutKey stores a new key.
func (m *Memory) PutKey(_ context.Context, k Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[k.Hash]; ok {
		return ErrExists
	}
	m.keys[k.Hash] = k
	return nil
}

// KeyByHash returns the key with that hash.
func (m *Memory) KeyByHash(_ context.Context, hash string) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[hash]
	if !ok {
		return Key{}, ErrNotFound
	}
	return k, nil
}

// Keys lists the keys, oldest first.
func (m *Memory) Keys(context.Context) ([]Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Key
	for _, k := range m.keys {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Key) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// KeyByID returns the key with that id.
func (m *Memory) KeyByID(_ context.Context, id string) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if k.ID == id {
			return k, nil
		}
	}
	return Key{}, ErrNotFound
}

// RevokeKey revokes the key with that id.
func (m *Memory) RevokeKey(_ context.Context, id string) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for h, k := range m.keys {
		if k.ID == id {
			k.Revoked = true
			m.keys[h] = k
			return k, nil
		}
	}
	return Key{}, ErrNotFound
}
