package limiter

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Weighted fair share with borrowing, on a rule of a shared subject (a
// provider, a model, a user path every team sends under): members are
// told apart by their child, user path, key, class or a tag. It is
// work-conserving, as virtual-token-counter fairness (VTC, OSDI '24) is:
// capacity is held back from one member only for another that wants it
// now. A member wants it now when it is backlogged: it was refused by the
// rule, and keeps asking. A refusal makes a member backlogged for a
// moment (probation, a second); asking again within the rule's horizon of
// its last ask (see horizon) keeps it backlogged for a horizon. While some members are backlogged,
// the rule's ceiling for a request of member m is the limit less what the
// other backlogged members are still owed of their weighted shares,
//
//	limit_m = limit − Σ_{j≠m backlogged} max(0, share_j − used_j)
//
// with share_j = limit × w_j / Σ w over the backlogged members and the
// requester, and used_j each member's own count (the same sliding
// estimate, fixed window, gauge, bucket fill or budget spending as the
// rule's). So:
//
//   - a rule no member is backlogged on refuses no one for fairness: only
//     its limit refuses;
//   - a member that asked once and went quiet strands nothing (refused
//     once, it holds its share for a second at most); one that was
//     backlogged and went quiet holds it for one horizon at most;
//   - while the rule is saturated, each backlogged member gets at least its
//     weighted share, and borrowing stops as soon as a member below its
//     share is refused (on this instance at once, on the others within
//     FairRefresh).
//
// Members are whatever clients send (a tag, a path below a key), so an
// instance follows at most MaxMembers of a rule by recent demand (the
// Space-Saving algorithm: the least asked is replaced, and counts halve
// each window); the others share one member, the pool. An admission's cost
// does not grow with the members ever seen: the shares are worked out
// when what is known of the backlogged members changes, and an admission
// looks up two numbers.
//
// Each member's use is one more counter (its own, or the pool's), charged
// in the same all-or-nothing charge as the rule's (one more conditional
// write per admission); which members are backlogged is kept in the
// store's roster of the rule, one entry a member and horizon naming until
// when, so every instance knows; each instance re-reads the roster and the backlogged
// members' counters at most every FairRefresh. The limit itself is exact
// as any other (limit_m ≤ limit); the shares are as fresh as that read.

// FairShare configures fair share on a rule.
type FairShare struct {
	// By tells members apart: "child" (of a user-path rule's subject),
	// "user_path" (the request's), "key", "class", or "tag:<name>".
	By string
	// Weights by member name (a child's segment, a user path, a key id, a
	// class, a tag value); DefaultWeight for the others (default 1).
	Weights       map[string]int64
	DefaultWeight int64
	// MaxMembers bounds the members an instance follows (DefaultFairMembers
	// when 0); the others share the pool.
	MaxMembers int
}

// FairRefresh is how long an instance uses what it read of the backlogged
// members of a fair-share rule before reading them again.
const FairRefresh = 500 * time.Millisecond

// DefaultFairMembers is how many members of one rule an instance follows
// when the rule sets no MaxMembers; MaxFairMembers the most a rule may set.
const (
	DefaultFairMembers = 256
	MaxFairMembers     = 4096
)

// fairProbation is how long one refusal keeps a member backlogged if it
// does not ask again.
const fairProbation = 2 * FairRefresh

// FairPool is the member every member an instance does not follow counts
// as.
const FairPool = "~pool"

// Rosters are stores that keep, per rule and window, a set of members, so
// that every instance knows every member: here the members backlogged on
// a fair-share rule, per horizon. Both stores are; a store that is not
// gives fair share only the backlogged members an instance sees itself.
type Rosters interface {
	JoinRoster(ctx context.Context, key string, window int64, member string, expires time.Time) error
	Roster(ctx context.Context, key string, windows []int64) ([]string, error)
}

func (f *FairShare) problems(r Rule) []error {
	var errs []error
	switch {
	case f.By == "child" && r.Scope != ScopeUserPath:
		errs = append(errs, errors.New("fair_share.by: child is for user-path rules; use user_path, key, class or tag:<name>"))
	case f.By == "child", f.By == "user_path", f.By == "key", f.By == "class":
	case strings.HasPrefix(f.By, "tag:"):
		if err := checkTagPart("fair_share.by", strings.TrimPrefix(f.By, "tag:")); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("fair_share.by: %q is not child, user_path, key, class or tag:<name>", f.By))
	}
	if r.PerChild || r.Shards > 1 {
		errs = append(errs, errors.New("fair_share: a fair-share rule is one shared counter: not per_child, not sharded"))
	}
	if f.DefaultWeight < 0 {
		errs = append(errs, errors.New("fair_share.default_weight: must not be negative"))
	}
	if f.MaxMembers < 0 || f.MaxMembers > MaxFairMembers {
		errs = append(errs, fmt.Errorf("fair_share.max_members: %d is not from 1 to %d (0: %d)", f.MaxMembers, MaxFairMembers, DefaultFairMembers))
	}
	for name, w := range f.Weights {
		if w < 1 || w > 1_000_000 {
			errs = append(errs, fmt.Errorf("fair_share.weights.%s: %d is not from 1 to 1000000", name, w))
		}
	}
	return errs
}

func (f *FairShare) weight(member string) int64 {
	if w, ok := f.Weights[member]; ok {
		return w
	}
	if f.DefaultWeight > 0 {
		return f.DefaultWeight
	}
	return 1
}

func (f *FairShare) maxMembers() int {
	if f.MaxMembers > 0 {
		return f.MaxMembers
	}
	return DefaultFairMembers
}

// member names the member a request belongs to; "" when it has none (no
// key, no such tag), which shares as one member.
func (f *FairShare) member(r Rule, s Subject, class string) string {
	switch {
	case f.By == "child":
		rest := strings.TrimPrefix(strings.ToLower(s.UserPath), strings.ToLower(strings.TrimSuffix(r.Subject, "/")))
		seg, _, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		return seg
	case f.By == "user_path":
		return strings.ToLower(s.UserPath)
	case f.By == "key":
		return s.Key
	case f.By == "class":
		return class
	}
	name := strings.TrimPrefix(f.By, "tag:")
	for _, t := range s.Tags {
		if strings.EqualFold(t.Name, name) {
			return strings.ToLower(t.Value)
		}
	}
	return ""
}

// horizon is how long a backlogged member stays backlogged after its last
// ask, and how close two asks must be for the second's refusal to make it
// backlogged: a quarter of the period of the rule's charges (a window's
// length, a bucket's fill time, a budget's longest period), from 2 to 15
// seconds; 5 s for a gauge, whose charges have none.
func horizon(period time.Duration) time.Duration {
	if period == 0 {
		return 5 * time.Second
	}
	return min(max(period/4, 2*time.Second), 15*time.Second)
}

// fairShares is a limiter's mutable fair-share state: what each instance
// knows of each fair-share rule's members.
type fairShares struct {
	byRule sync.Map // rule counter → *fairState
}

func (fs *fairShares) of(r *rule) *fairState {
	if v, ok := fs.byRule.Load(r.counter); ok {
		return v.(*fairState)
	}
	v, _ := fs.byRule.LoadOrStore(r.counter, &fairState{members: map[string]*fairMember{}})
	return v.(*fairState)
}

// fairState is what an instance knows of one fair-share rule's members.
type fairState struct {
	mu sync.Mutex
	// members are the members followed, by name, with a min-heap of them
	// by recent demand (their asks, halved each window of the rule); pool
	// stands for every other member.
	members map[string]*fairMember
	demand  fairHeap
	pool    fairMember
	window  int64 // the window the asks are counted in
	// readAt is when the fleet's backlogged members were last read: the
	// roster (fleet) and their counters (used).
	readAt time.Time
	fleet  map[string]bool
	used   map[string]State
	// The shares of what is known, worked out when it changes (dirty): for
	// a backlogged requester (inside), and for another (outside, one more
	// default weight among the shares).
	dirty                bool
	owedIn               map[string]int64
	sumIn, sumOut        int64
	lastLimit, lastShare int64
}

// fairMember is one followed member.
type fairMember struct {
	name  string
	asks  int64
	index int // in the demand heap
	// lastAsk is when it last asked (on this instance); backlogUntil when
	// it stops being backlogged unless it asks again; announced until when
	// the roster has it backlogged, as this instance last wrote.
	lastAsk      time.Time
	backlogUntil time.Time
	announced    time.Time
}

// fairHeap orders followed members by their asks, fewest first.
type fairHeap []*fairMember

func (h fairHeap) Len() int           { return len(h) }
func (h fairHeap) Less(i, j int) bool { return h[i].asks < h[j].asks }
func (h fairHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *fairHeap) Push(x any)        { m := x.(*fairMember); m.index = len(*h); *h = append(*h, m) }
func (h *fairHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

// follow counts an ask of member and returns the name its use counts
// under: its own when followed, else the pool's. A member not followed
// replaces the least asked one when the followed are as many as allowed,
// taking over its count plus one (Space-Saving): a member asking more
// than one in MaxMembers of the asks is always followed. At a new window
// of the rule, counts halve.
func (s *fairState) follow(f *FairShare, member string, window int64, now time.Time) *fairMember {
	if window != s.window {
		s.window = window
		for _, m := range s.demand {
			m.asks /= 2
		}
		heap.Init(&s.demand)
	}
	m, ok := s.members[member]
	switch {
	case ok:
		m.asks++
		heap.Fix(&s.demand, m.index)
	case len(s.demand) < f.maxMembers():
		m = &fairMember{name: member, asks: 1}
		s.members[member] = m
		heap.Push(&s.demand, m)
	default:
		// Replace the least asked, unless it is backlogged: a member whose
		// share is being kept for it is not dropped for a newcomer.
		least := s.demand[0]
		if least.backlogUntil.After(now) {
			return nil
		}
		delete(s.members, least.name)
		s.dirty = s.dirty || s.owedIn[least.name] != 0
		least.name, least.asks, least.lastAsk, least.backlogUntil, least.announced = member, least.asks+1, time.Time{}, time.Time{}, time.Time{}
		s.members[member] = least
		heap.Fix(&s.demand, least.index)
		m = least
	}
	return m
}

// entry is the followed member named, or the pool; nil for a member not
// followed.
func (s *fairState) entry(name string) *fairMember {
	if name == FairPool {
		s.pool.name = FairPool
		return &s.pool
	}
	return s.members[name]
}

// rosterKey names the roster of a rule's backlogged members.
func rosterKey(r *rule) string { return r.counter + "~want" }

// memberProto is the charge a member's counter of rule r is made from:
// the rule's own shape, but for a bucket, whose counter is an arrival time,
// a sliding window over the bucket's fill time (its charges' Period),
// which counts what each member took of it.
func memberProto(now time.Time, r *rule, child string, kind Kind, limit int64) Charge {
	if _, bucket := r.Limit.(Bucket); !bucket {
		return r.newCharge(now, child, kind, limit, 0)
	}
	c := Charge{Counter: Counter{Rule: r.counter, Child: child, Kind: kind}, Period: r.span, Limit: limit, owner: r, whole: limit}
	c.Counter.Window, _ = windowAt(now, r.span)
	return c
}

// memberCharge is the charge of a member's own counter: counted, never
// refused.
func memberCharge(c Charge, member string) Charge {
	c.Counter.Rule += "~fair"
	c.Counter.Child = member
	c.Limit, c.whole = MaxAmount, MaxAmount
	if c.IsGauge() {
		// A gauge holds slots: no member holds more than the rule does.
		c.Limit = c.owner.limitOf(KindInFlight)
		c.whole = c.Limit
	}
	c.fairMember, c.member = true, member
	return c
}

// fairMemberOf counts an ask of the request's member on rule r and
// returns the name its use counts under (its own, or FairPool).
func (l *Limiter) fairMemberOf(now time.Time, r *rule, name string, proto Charge) string {
	fs := l.fair.of(r)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if m := fs.follow(r.FairShare, name, proto.Counter.Window, now); m != nil {
		return m.name
	}
	return FairPool
}

// refreshFair reads which members of a fair-share rule the fleet has
// backlogged and what their counters hold, when what this instance has
// is older than FairRefresh. A failed read keeps what it had: shares are
// a matter of fairness, not of the limit.
func (l *Limiter) refreshFair(ctx context.Context, now time.Time, r *rule, proto Charge) {
	fs := l.fair.of(r)
	fs.mu.Lock()
	fresh := now.Sub(fs.readAt) < FairRefresh && !now.Before(fs.readAt)
	fs.mu.Unlock()
	if fresh {
		return
	}
	h := horizon(proto.Period)
	bucket := now.UnixNano() / int64(h)
	names := map[string]bool{}
	if rs, ok := l.store.(Rosters); ok {
		if got, err := rs.Roster(ctx, rosterKey(r), []int64{bucket, bucket - 1}); err == nil {
			for _, e := range got {
				if n, until, ok := parseRosterEntry(e); ok && until.After(now) && len(names) < r.FairShare.maxMembers() {
					names[n] = true
				}
			}
		}
	}
	fs.mu.Lock()
	for n, m := range fs.members {
		if m.backlogUntil.After(now) {
			names[n] = true
		}
	}
	if fs.pool.backlogUntil.After(now) {
		names[FairPool] = true
	}
	fs.mu.Unlock()
	reads := make([]Charge, 0, len(names))
	order := make([]string, 0, len(names))
	for n := range names {
		reads = append(reads, memberCharge(proto, n))
		order = append(order, n)
	}
	var states []State
	var err error
	if len(reads) > 0 {
		states, err = l.store.Read(ctx, now, reads)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.readAt = now
	if err != nil || len(states) != len(order) {
		return
	}
	fs.fleet = names
	fs.used = make(map[string]State, len(order))
	for i, n := range order {
		fs.used[n] = states[i]
	}
	fs.dirty = true
}

// fairLimit is the ceiling of the rule's limit for a request of member
// (see above), from what this instance knows.
func (l *Limiter) fairLimit(now time.Time, r *rule, f *FairShare, limit int64, member string, proto Charge) int64 {
	fs := l.fair.of(r)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.share(now, f, limit, proto)
	if fs.backlogged(member, now) {
		return max(0, limit-(fs.sumIn-fs.owedIn[member]))
	}
	return max(0, limit-fs.sumOut)
}

// backlogged reports whether member is backlogged, on this instance or
// in the fleet as last read.
func (s *fairState) backlogged(member string, now time.Time) bool {
	if m := s.entry(member); m != nil && m.backlogUntil.After(now) {
		return true
	}
	return s.fleet[member]
}

// share works out what each backlogged member is owed, when what is known
// changed since the last time: O(backlogged members), which are at most
// the members followed plus those the roster names.
func (s *fairState) share(now time.Time, f *FairShare, limit int64, proto Charge) {
	if !s.dirty && limit == s.lastLimit {
		return
	}
	s.dirty, s.lastLimit = false, limit
	used := func(st State) float64 { return float64(max(st.Cur, 0)) } // a gauge's slots, a fixed window's or a budget's count
	if proto.Sliding() {
		_, elapsed := windowAt(now, proto.Period)
		used = func(st State) float64 {
			return float64(max(st.Prev, 0))*(1-float64(elapsed)/float64(proto.Period)) + float64(max(st.Cur, 0))
		}
	}
	var weights int64
	var backlog []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			backlog = append(backlog, n)
			weights += f.weight(n)
		}
	}
	for n := range s.fleet {
		add(n)
	}
	for n, m := range s.members {
		if m.backlogUntil.After(now) {
			add(n)
		}
	}
	if s.pool.backlogUntil.After(now) {
		add(FairPool)
	}
	clear(s.owedIn)
	if s.owedIn == nil {
		s.owedIn = map[string]int64{}
	}
	var in, out float64
	for _, n := range backlog {
		w := float64(f.weight(n))
		u := used(s.used[n])
		owedIn := math.Max(0, float64(limit)*w/float64(weights)-u)
		owedOut := math.Max(0, float64(limit)*w/float64(weights+f.weight(""))-u)
		// What is owed is rounded down, so that members a fraction short
		// of their shares do not hold places for each other.
		s.owedIn[n] = int64(math.Floor(owedIn))
		in += math.Floor(owedIn)
		out += math.Floor(owedOut)
	}
	s.sumIn, s.sumOut = int64(in), int64(out)
}

// noteFair records what a charge's answer says of member's counter and
// whether the rule refused it. A refused member is backlogged: for a
// horizon when it asked before within one (or was backlogged), else for
// its probation; a backlogged member that asks again stays so for a
// horizon. Whenever that moves its end past what the rule's roster says,
// it is announced there, so that its share is kept everywhere: at most
// twice per horizon and member on each instance.
func (l *Limiter) noteFair(ctx context.Context, now time.Time, r *rule, member string, c Charge, s State, refused bool) {
	fs := l.fair.of(r)
	h := horizon(c.Period)
	fs.mu.Lock()
	m := fs.entry(member)
	var announce time.Time
	if m != nil {
		asked := !m.lastAsk.IsZero() && now.Sub(m.lastAsk) < h && !now.Before(m.lastAsk)
		switch {
		case fs.backlogged(member, now), refused && asked:
			m.backlogUntil = now.Add(h)
		case refused:
			m.backlogUntil = now.Add(min(fairProbation, h))
		}
		if m.backlogUntil.After(now) {
			fs.dirty = true
			if m.backlogUntil.Sub(m.announced) > h/2 || !m.announced.After(now) {
				m.announced, announce = m.backlogUntil, m.backlogUntil
			}
		}
		m.lastAsk = now
	}
	if fs.used == nil {
		fs.used = map[string]State{}
	}
	if _, read := fs.used[member]; read || (m != nil && m.backlogUntil.After(now)) {
		fs.used[member] = s // the store's answer: fresher than the last read
		fs.dirty = true
	}
	fs.mu.Unlock()
	if rs, isRoster := l.store.(Rosters); isRoster && !announce.IsZero() {
		_ = rs.JoinRoster(ctx, rosterKey(r), now.UnixNano()/int64(h), rosterEntry(member, announce), now.Add(3*h))
	}
}

// rosterEntry is a roster's entry for member, backlogged until until:
// "<member>|<unix ms>".
func rosterEntry(member string, until time.Time) string {
	return member + "|" + strconv.FormatInt(until.UnixMilli(), 10)
}

// parseRosterEntry is the inverse of rosterEntry.
func parseRosterEntry(e string) (string, time.Time, bool) {
	i := strings.LastIndexByte(e, '|')
	if i < 0 {
		return "", time.Time{}, false
	}
	ms, err := strconv.ParseInt(e[i+1:], 10, 64)
	return e[:i], time.UnixMilli(ms), err == nil
}

// refreshFairs brings what this instance knows of the fair-share rules
// among ms up to date.
func (l *Limiter) refreshFairs(ctx context.Context, now time.Time, ms []match) {
	for _, m := range ms {
		r := m.rule
		if r.FairShare == nil {
			continue
		}
		kind, limit := r.Limit.fairDimension()
		l.refreshFair(ctx, now, r, memberProto(now, r, m.child, kind, limit))
	}
}

// noteFairs records what a charge's answer says of fair-share members:
// each member's counter, and whether its rule refused it.
func (l *Limiter) noteFairs(ctx context.Context, now time.Time, charges []Charge, out Outcome) {
	for i := range charges {
		c := &charges[i]
		if !c.fairMember || i >= len(out.States) {
			continue
		}
		refused := false
		for j := range charges {
			if j < len(out.States) && charges[j].owner == c.owner && !charges[j].fairMember && out.States[j].Refused {
				refused = true
			}
		}
		l.noteFair(ctx, now, c.owner, c.member, *c, out.States[i], refused)
	}
}
