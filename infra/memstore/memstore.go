// Package memstore is the embedded limiter.Store: counters and leases in
// process memory behind one mutex, with a change feed of finished leases
// for the in-process reconciler. It is what `make run` uses, and the
// reference the DynamoDB store is held to by the shared behaviour suite.
//
// State lives as long as the process: limits hold across the goroutines of
// one process, not across processes.
package memstore

import (
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// settleGrace is how long a window's counter is kept after it stops being
// anyone's previous window, for settlements that arrive late, and how long
// a lease is remembered after it expired, for a late completion and
// against a settlement replayed. The in-process reconciler runs every few
// seconds, so an hour is ample.
const settleGrace = time.Hour

// Store is an in-memory limiter.Store. The zero value is not usable; call
// New.
type Store struct {
	mu       sync.Mutex
	counters map[limiter.Counter]*cell
	leases   map[string]*lease
	expiry   leaseHeap // active leases by expiry
	settled  map[string]time.Time
	// expired remembers leases that expired without completing, until
	// settleGrace after their expiry, so a late completion is settled.
	expired map[string]*limiter.Lease
	events  []Event
	first   uint64 // sequence number of events[0]
	// swept is when sweep last ran, in Unix ns; swept0 whether it has.
	swept  int64
	swept0 bool
	// rosters are fair-share rules' members by rule and window.
	rosters map[string]map[int64]map[string]bool
	// stats are the dashboard's counts by kind, minute and name.
	stats map[string]map[int64]map[string]float64

	cooldowns map[string]time.Time
	upstream  map[string]limiter.UpstreamReport

	// recent is a direct-mapped cache of counters' cells in front of
	// counters, for the counters charged again and again: see lookup.
	recent [256]recentCell

	// slab is where the states of charges' answers are cut from, a few
	// at a time: one allocation per many answers, not one per answer.
	slab []limiter.State
}

// slabStates is how many states one slab holds.
const slabStates = 512

// recentCell is a counter and its cell, as a lookup found them.
type recentCell struct {
	k  limiter.Counter
	cl *cell
}

type cell struct {
	n        int64
	reserved int64 // a budget's: the part of n not yet settled
	expires  int64 // Unix ns after which the cell may be dropped; 0 = never
	// prev is the cell of the same counter one window earlier, when it
	// exists, so that a sliding window's charge reads both counts with
	// one lookup: linked when either cell is added. gone marks a cell
	// dropped from the map, which counts nothing any more.
	prev *cell
	gone bool
}

type lease struct {
	limiter.Lease     // the store's own copy: Renew changes it
	index         int // in the expiry heap; -1 once out of it
}

var _ limiter.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		counters: map[limiter.Counter]*cell{},
		leases:   map[string]*lease{},
		settled:  map[string]time.Time{},
		expired:  map[string]*limiter.Lease{},
	}
}

// InProcess reports true: the store's calls never wait on a network (see
// limiter.Limiter.InProcess), so the gateway puts no deadline on them. A
// test double that embeds Store to stall or fail must say false.
func (s *Store) InProcess() bool { return true }

// Charge implements limiter.Store.
func (s *Store) Charge(_ context.Context, now time.Time, charges []limiter.Charge, l *limiter.Lease) (limiter.Outcome, error) {
	if err := limiter.CheckCharges(charges); err != nil {
		return limiter.Outcome{}, err
	}
	if err := limiter.CheckLease(l); err != nil {
		return limiter.Outcome{}, err
	}
	// cells are the charged counters' cells as the check found them (nil
	// for a counter not yet written), so that the charge is one lookup of
	// each; found again if reclaiming expired leases dropped some.
	var buf [8]*cell
	cells := buf[:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	states := s.statesFor(len(charges))
	admitted := true
	reclaimed := false
	for i := range charges {
		c := &charges[i]
		cl := s.lookup(&c.Counter)
		st := s.state(c, cl)
		ceiling := c.Ceiling(st.Prev, now)
		if st.Cur > ceiling && c.Counter.Kind == limiter.KindInFlight && !reclaimed {
			// Leases past their expiry no longer hold slots.
			s.reclaim(now)
			reclaimed = true
			cl = s.counters[c.Counter]
			st = s.state(c, cl)
			ceiling = c.Ceiling(st.Prev, now)
		}
		if st.Cur > ceiling {
			st.Refused = true
			admitted = false
		}
		states[i] = st
		cells = append(cells, cl)
	}
	if !admitted {
		return limiter.Outcome{States: states}, nil
	}
	if l != nil {
		if _, dup := s.leases[l.ID]; dup {
			return limiter.Outcome{}, fmt.Errorf("memstore: lease %q already exists", l.ID)
		}
	}
	for i := range charges {
		c := &charges[i]
		cl := cells[i]
		if cl == nil || reclaimed {
			cl = s.cellOf(c.Counter)
		}
		if c.Floor > states[i].Cur {
			cl.add(c, c.Floor-states[i].Cur) // a bucket that refilled
			states[i].Cur = c.Floor
		}
		cl.add(c, c.Amount)
		states[i].Cur += c.Amount
		if c.Counter.Kind == limiter.KindCost {
			cl.reserve(c.Amount)
			states[i].Reserved += c.Amount
		}
	}
	if l != nil {
		ls := &lease{Lease: *l} // the caller keeps its own
		s.leases[l.ID] = ls
		heap.Push(&s.expiry, ls)
	}
	return limiter.Outcome{Admitted: true, States: states}, nil
}

// Complete implements limiter.Store.
func (s *Store) Complete(_ context.Context, now time.Time, l *limiter.Lease, used limiter.Usage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls, ok := s.leases[l.ID]; ok {
		s.finish(ls, StatusCompleted, used, now)
		return nil
	}
	if el, ok := s.expired[l.ID]; ok {
		// Completed after its expiry released its slots: its usage is
		// still settled, once.
		delete(s.expired, l.ID)
		s.events = append(s.events, Event{Seq: s.first + uint64(len(s.events)), Lease: el, Status: StatusCompleted, Used: used, At: now})
	}
	return nil // completed before, or unknown
}

// Renew implements limiter.Store.
func (s *Store) Renew(_ context.Context, now time.Time, l *limiter.Lease, until time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, ok := s.leases[l.ID]
	if !ok || !ls.ExpiresAt.After(now) {
		return false, nil
	}
	if until.After(ls.ExpiresAt) {
		ls.ExpiresAt = until
		heap.Fix(&s.expiry, ls.index)
	}
	return true, nil
}

// Settle implements limiter.Store.
func (s *Store) Settle(_ context.Context, settlements []limiter.Settlement) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	applied := 0
	// As the DynamoDB store does: a window's corrections are summed over
	// the call and applied once, a refund taking the counter to zero at
	// most (it cannot take more, by construction, unless a counter was
	// changed by hand).
	sums := map[limiter.Counter]int64{}
	charges := map[limiter.Counter]*limiter.Charge{}
	var order []limiter.Counter
	for n, st := range settlements {
		id := st.Lease.ID
		if _, done := s.settled[id]; done || !limiter.NeedsSettling(st) {
			continue
		}
		settlements[n].Applied = true
		released := limiter.Released(st)
		for i, d := range limiter.Corrections(st) {
			c := &st.Lease.Charges[i]
			switch {
			case d > 0 && c.Shape == limiter.ShapeBucket:
				// An overshoot on a bucket: max(value, floor) + overshoot.
				if cur := s.value(c.Counter); cur < c.Floor {
					s.add(c, c.Floor-cur)
				}
				s.add(c, d)
			case d != 0:
				if _, ok := charges[c.Counter]; !ok {
					charges[c.Counter] = c
					order = append(order, c.Counter)
				}
				sums[c.Counter] = limiter.SatAdd(sums[c.Counter], d)
			}
			if released[i] != 0 {
				s.cellOf(c.Counter).reserve(-released[i])
			}
		}
		s.settled[id] = maxTime(st.Lease.ExpiresAt, st.Lease.AdmittedAt)
		applied++
	}
	for _, k := range order {
		if d := sums[k]; d != 0 {
			s.add(charges[k], d) // never below zero
		}
	}
	return applied, nil
}

// Read implements limiter.Store.
func (s *Store) Read(_ context.Context, now time.Time, charges []limiter.Charge) ([]limiter.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reclaim(now)
	out := make([]limiter.State, len(charges))
	for i := range charges {
		out[i] = s.state(&charges[i], s.counters[charges[i].Counter])
	}
	return out, nil
}

// Expire releases the slots of leases past their expiry that were never
// completed, keeping their reservations charged, and returns how many it
// released. Charge does the same on demand; the reconciler calls this so
// the change feed reports orphans promptly.
func (s *Store) Expire(_ context.Context, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reclaim(now), nil
}

// state is what charge c reads of its counter, whose cell is cl (nil
// when the counter was never written).
func (s *Store) state(c *limiter.Charge, cl *cell) limiter.State {
	var st limiter.State
	if cl != nil {
		st = limiter.State{Cur: cl.n, Reserved: cl.reserved}
	}
	switch {
	case !c.Sliding():
	case c.Prev != nil:
		counts := make([]int64, len(c.Prev.Counters))
		for i, pc := range c.Prev.Counters {
			counts[i] = s.value(pc)
		}
		st.Prev = c.PrevOf(counts)
	case cl == nil:
		st.Prev = s.value(c.Counter.Previous())
	case cl.prev != nil && !cl.prev.gone:
		st.Prev = cl.prev.n
	}
	return st
}

// value is a counter's count, 0 when it was never written.
func (s *Store) value(k limiter.Counter) int64 {
	if cl := s.counters[k]; cl != nil {
		return cl.n
	}
	return 0
}

// cellOf returns a counter's cell, adding it when it was never written.
func (s *Store) cellOf(k limiter.Counter) *cell {
	cl := s.counters[k]
	if cl == nil {
		cl = &cell{}
		s.counters[k] = cl
		if k.Kind != limiter.KindInFlight { // a gauge has one window
			cl.prev = s.counters[k.Previous()]
			next := k
			next.Window++
			if n := s.counters[next]; n != nil {
				n.prev = cl
			}
		}
	}
	return cl
}

// lookup returns counter k's cell, nil when it was never written, as
// counters holds it. A counter found before is found in recent, without
// hashing its names: its entry is used only when it names k and its cell
// is still in counters. The entry is picked by the address of k's rule
// name (one string per rule, which every charge of the rule shares) and
// its numbers; names equal at other addresses only miss more.
func (s *Store) lookup(k *limiter.Counter) *cell {
	h := uint64(uintptr(unsafe.Pointer(unsafe.StringData(k.Rule))))>>3 ^ uint64(len(k.Child))<<7 ^
		uint64(k.Window)*0x9e3779b97f4a7c15 ^ uint64(k.Shard)<<11 ^ uint64(k.Shards)<<17 ^ uint64(k.Kind)<<23
	e := &s.recent[uint8(h^h>>8^h>>16^h>>24)]
	if e.cl != nil && !e.cl.gone && e.k == *k {
		return e.cl
	}
	cl := s.counters[*k]
	if cl != nil {
		*e = recentCell{k: *k, cl: cl}
	}
	return cl
}

// statesFor returns n zero states for an answer, cut from the slab: each
// answer's states are its own (a capacity of n), and a slab is dropped
// by the collector once no answer cut from it is kept.
func (s *Store) statesFor(n int) []limiter.State {
	if n > slabStates/8 {
		return make([]limiter.State, n)
	}
	if len(s.slab) < n {
		s.slab = make([]limiter.State, slabStates)
	}
	st := s.slab[:n:n]
	s.slab = s.slab[n:]
	return st
}

// drop removes counter k, whose cell is cl.
func (s *Store) drop(k limiter.Counter, cl *cell) {
	cl.gone = true
	delete(s.counters, k)
}

// reserve changes what a budget's counter holds in reservations.
func (cl *cell) reserve(d int64) {
	cl.reserved = max(0, limiter.SatAdd(cl.reserved, d))
}

// add changes the counter of charge c, whose cell cl is, by d,
// saturating, and never below zero.
func (cl *cell) add(c *limiter.Charge, d int64) {
	cl.n = max(0, limiter.SatAdd(cl.n, d))
	// A window's cell expires with its window, which it is the cell of; a
	// bucket's one counter lives as long as it is written to.
	if !c.IsGauge() && (cl.expires == 0 || c.Shape == limiter.ShapeBucket) {
		cl.expires = max(cl.expires, c.WindowEnd().Add(c.Period+settleGrace).UnixNano())
	}
}

// add changes a counter by d as cell.add does, and drops a gauge's
// counter that it takes to zero.
func (s *Store) add(c *limiter.Charge, d int64) {
	cl := s.cellOf(c.Counter)
	cl.add(c, d)
	if cl.n == 0 && c.IsGauge() {
		s.drop(c.Counter, cl)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// finish ends an active lease: releases its in-flight charges, records the
// event for the reconciler.
func (s *Store) finish(ls *lease, status Status, used limiter.Usage, now time.Time) {
	for i := range ls.Charges {
		if c := &ls.Charges[i]; c.Counter.Kind == limiter.KindInFlight {
			s.add(c, -c.Amount)
		}
	}
	delete(s.leases, ls.ID)
	if ls.index >= 0 {
		heap.Remove(&s.expiry, ls.index)
	}
	if status == StatusExpired {
		s.expired[ls.ID] = &ls.Lease
	}
	s.events = append(s.events, Event{
		Seq:    s.first + uint64(len(s.events)),
		Lease:  &ls.Lease,
		Status: status,
		Used:   used,
		At:     now,
	})
}

// reclaim finishes every active lease whose expiry is at or before now.
func (s *Store) reclaim(now time.Time) int {
	n := 0
	for len(s.expiry) > 0 && !s.expiry[0].ExpiresAt.After(now) {
		s.finish(s.expiry[0], StatusExpired, limiter.Usage{}, now)
		n++
	}
	return n
}

// sweep drops counters and settlement marks nobody can need any more, at
// most once a minute of the callers' time.
func (s *Store) sweep(now time.Time) {
	ns := now.UnixNano()
	if s.swept0 && ns-s.swept < int64(time.Minute) {
		return
	}
	s.swept, s.swept0 = ns, true
	for k, c := range s.counters {
		// A gauge's cell left at zero (a charge of nothing) has no expiry.
		if c.expires != 0 && c.expires < ns || c.expires == 0 && c.n == 0 && c.reserved == 0 {
			s.drop(k, c)
		}
	}
	for id, exp := range s.settled {
		if now.Sub(exp) > settleGrace {
			delete(s.settled, id)
		}
	}
	for id, l := range s.expired {
		if now.Sub(l.ExpiresAt) > settleGrace {
			delete(s.expired, id)
		}
	}
}

// Status is how a lease ended.
type Status uint8

const (
	StatusCompleted Status = iota + 1 // the request finished and reported usage
	StatusExpired                     // its process never completed it
)

// Event is one entry of the change feed: a lease that ended.
type Event struct {
	Seq    uint64
	Lease  *limiter.Lease
	Status Status
	Used   limiter.Usage
	At     time.Time
}

// Events returns up to max events with sequence numbers ≥ from, and the
// sequence number to read from next.
func (s *Store) Events(from uint64, max int) ([]Event, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from < s.first {
		from = s.first
	}
	i := int(from - s.first)
	if i >= len(s.events) {
		return nil, from
	}
	j := min(len(s.events), i+max)
	out := append([]Event(nil), s.events[i:j]...)
	return out, from + uint64(j-i)
}

// Trim forgets events before seq, once the reconciler has applied them.
func (s *Store) Trim(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.first {
		return
	}
	n := min(int(seq-s.first), len(s.events))
	s.events = append(s.events[:0:0], s.events[n:]...)
	s.first += uint64(n)
}

// Release implements reconcile.Store. The embedded store releases slots
// in the same step that ends a lease, so there is never anything left.
func (s *Store) Release(context.Context, []limiter.Lease) (int, error) { return 0, nil }

var _ reconcile.Store = (*Store)(nil)

// Feed returns the store's change feed as a reconcile.Source, from the
// oldest event kept. Committing a batch forgets its events.
func (s *Store) Feed() reconcile.Source { return &feed{s: s} }

type feed struct {
	s    *Store
	next uint64
}

func (f *feed) Next(_ context.Context, max int) (*reconcile.Batch, error) {
	evs, next := f.s.Events(f.next, max)
	if len(evs) == 0 {
		return nil, nil
	}
	changes := make([]reconcile.Change, len(evs))
	for i, e := range evs {
		kind := reconcile.Completed
		if e.Status == StatusExpired {
			kind = reconcile.Expired
		}
		changes[i] = reconcile.Change{ID: strconv.FormatUint(e.Seq, 10), Kind: kind, Lease: *e.Lease, Used: e.Used, At: e.At, Released: true}
	}
	return &reconcile.Batch{Changes: changes, Commit: func(context.Context) error {
		f.next = next
		f.s.Trim(next)
		return nil
	}}, nil
}

// leaseHeap orders active leases by expiry.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].ExpiresAt.Before(h[j].ExpiresAt) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.index = -1
	*h = old[:len(old)-1]
	return l
}

// CooldownUntil returns, for each key, until when it cools down.
func (s *Store) CooldownUntil(_ context.Context, keys []string) (map[string]time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]time.Time{}
	for _, k := range keys {
		if t, ok := s.cooldowns[k]; ok {
			out[k] = t
		}
	}
	return out, nil
}

// RecordUpstream records rep under key unless a report was recorded
// within every before rep.At; it reports whether it wrote.
func (s *Store) RecordUpstream(_ context.Context, key string, rep limiter.UpstreamReport, every time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key = strings.ToLower(key)
	if old, ok := s.upstream[key]; ok && old.At.After(rep.At.Add(-every)) {
		return false, nil
	}
	if s.upstream == nil {
		s.upstream = map[string]limiter.UpstreamReport{}
	}
	s.upstream[key] = rep
	return true, nil
}

// UpstreamReports returns the reports recorded under keys.
func (s *Store) UpstreamReports(_ context.Context, keys []string) (map[string]limiter.UpstreamReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]limiter.UpstreamReport{}
	for _, k := range keys {
		if rep, ok := s.upstream[strings.ToLower(k)]; ok {
			out[k] = rep
		}
	}
	return out, nil
}

// SetCooldown extends a key's cooldown to until.
func (s *Store) SetCooldown(_ context.Context, key string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cooldowns == nil {
		s.cooldowns = map[string]time.Time{}
	}
	if until.After(s.cooldowns[key]) {
		s.cooldowns[key] = until
	}
	return nil
}
