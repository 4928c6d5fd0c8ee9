package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// Weighted fair share with borrowing, on a window rule of a shared
// subject (a provider, a model, a user path every team sends under):
// members are told apart by their child, user path, key, class or a tag.
// Each active member (one that asked in this window or the last, admitted
// or refused) is guaranteed its weighted share of the limit; a member may borrow idle
// capacity beyond its share, but never what the other active members'
// shares still leave unused. So while a member below its share asks, the
// members above theirs are refused first: the shared counter's ceiling for
// a request of member m is the limit less what the other members are
// still owed,
//
//	limit_m = limit − Σ_{j≠m active} max(0, share_j − used_j)
//
// (what is owed rounded down, so that members a fraction short of their
// shares do not hold places for each other) with share_j = limit × w_j /
// Σ w (over active members) and used_j each member's own sliding count.
// This is virtual-token-counter fairness (VTC,
// OSDI '24) reduced to what stateless instances can share through the
// store: every member's use is one more counter, charged in the same
// all-or-nothing charge as the rule's (one more conditional write per
// admission), and each instance re-reads the members' counters and the
// rule's roster of members at most every FairRefresh. The limit itself is
// exact as any other (limit_m ≤ limit); the shares are as fresh as that
// read: a member's share can be lent for up to FairRefresh.

// FairShare configures fair share on a rule.
type FairShare struct {
	// By tells members apart: "child" (of a user-path rule's subject),
	// "user_path" (the request's), "key", "class", or "tag:<name>".
	By string
	// Weights by member name (a child's segment, a user path, a key id, a
	// class, a tag value); DefaultWeight for the others (default 1).
	Weights       map[string]int64
	DefaultWeight int64
}

// FairRefresh is how long an instance uses what it read of the members of
// a fair-share rule before reading them again.
const FairRefresh = 500 * time.Millisecond

// MaxFairMembers bounds the members of one rule an instance follows and
// reads each refresh: past it, the others are known only through their
// own admissions on this instance (they still count in the rule's own
// counter, so the limit holds; only their shares are not reserved).
const MaxFairMembers = 256

// Rosters are stores that keep, per rule and window, the set of members
// that used the rule, so that every instance knows every member. Both
// stores are; a store that is not gives fair share only the members an
// instance sees itself.
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

// rosterWindow is the window a member's asking is recorded in: the
// charge's window, or for a gauge, which has none, the minute.
func rosterWindow(c Charge, now time.Time) int64 {
	if c.Period == Concurrent {
		return now.Unix() / 60
	}
	return c.Counter.Window
}

// fairState is what an instance knows of a fair-share rule's members.
type fairState struct {
	mu      sync.Mutex
	readAt  time.Time
	window  int64
	members map[string]State // each member's counter, this window and the last
	// asked are the members that asked in this window or the last (the
	// roster, and what this instance saw): active even before they got
	// anything in, which is how a member refused stops the others borrowing.
	asked  map[string]bool
	seen   map[string]time.Time
	joined map[string]int64 // the window each member last joined the roster in, by this instance
}

func (l *Limiter) fairOf(r *rule) *fairState {
	v, _ := l.fair.LoadOrStore(r.counter, &fairState{members: map[string]State{}, asked: map[string]bool{}, seen: map[string]time.Time{}, joined: map[string]int64{}})
	return v.(*fairState)
}

// memberProto is the charge a member's counter of rule r is made from:
// the rule's own shape, but for a bucket, whose counter is an arrival time,
// a sliding window over the bucket's fill time (its Period), which counts
// what each member took of it.
func memberProto(now time.Time, r *rule, child string, kind Kind, limit int64) Charge {
	if r.Bucket == nil {
		return r.newCharge(now, child, kind, limit, 0)
	}
	c := Charge{Counter: Counter{Rule: r.counter, Child: child, Kind: kind}, Period: r.Period, Limit: limit, owner: r, whole: limit}
	c.Counter.Window, _ = windowAt(now, r.Period)
	return c
}

// memberCharge is the charge of a member's own counter: counted, never
// refused.
func memberCharge(c Charge, member string) Charge {
	c.Counter.Rule += "~fair"
	c.Counter.Child = member
	c.Limit, c.whole = MaxAmount, MaxAmount
	if c.Period == Concurrent {
		// A gauge holds slots: no member holds more than the rule does.
		c.Limit, c.whole = c.owner.MaxRequests, c.owner.MaxRequests
	}
	c.shadow = false
	c.fairMember, c.member = true, member
	return c
}

// refreshFair reads the roster and the members' counters of a fair-share
// rule when what this instance has is older than FairRefresh or from
// another window. A failed read keeps what it had: shares are a matter of
// fairness, not of the limit.
func (l *Limiter) refreshFair(ctx context.Context, now time.Time, r *rule, proto Charge) {
	fs := l.fairOf(r)
	window := rosterWindow(proto, now)
	fs.mu.Lock()
	fresh := window == fs.window && now.Sub(fs.readAt) < FairRefresh && !now.Before(fs.readAt)
	fs.mu.Unlock()
	if fresh {
		return
	}
	names := map[string]bool{}
	roster := map[string]bool{}
	if rs, ok := l.store.(Rosters); ok {
		got, err := rs.Roster(ctx, r.counter, []int64{window, window - 1})
		if err == nil {
			for _, n := range got {
				names[n], roster[n] = true, true
			}
		}
	}
	fs.mu.Lock()
	for n := range fs.seen {
		names[n] = true
	}
	fs.mu.Unlock()
	reads := make([]Charge, 0, min(len(names), MaxFairMembers))
	order := make([]string, 0, cap(reads))
	for n := range names {
		if len(order) == MaxFairMembers {
			break // a bounded read: past it, members are seen through their own admissions
		}
		reads = append(reads, memberCharge(proto, n))
		order = append(order, n)
	}
	states, err := l.store.Read(ctx, now, reads)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.readAt = now
	if window != fs.window {
		fs.window = window
		clear(fs.members)
	}
	fs.asked = roster
	if err != nil || len(states) != len(order) {
		return
	}
	for i, n := range order {
		fs.members[n] = states[i]
		if _, ok := fs.seen[n]; !ok && len(fs.seen) < MaxFairMembers {
			fs.seen[n] = now
		}
	}
}

// fairLimit is the ceiling of the rule's limit for a request of member
// (see above), from what this instance knows.
func (l *Limiter) fairLimit(now time.Time, r *rule, f *FairShare, limit, amount int64, member string, proto Charge) int64 {
	period := proto.Period
	fs := l.fairOf(r)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	used := func(s State) float64 { return float64(s.Cur) } // a gauge's slots, a fixed window's or a budget's count
	if proto.Sliding() {
		_, elapsed := windowAt(now, period)
		used = func(s State) float64 {
			return float64(s.Prev)*(1-float64(elapsed)/float64(period)) + float64(s.Cur)
		}
	}
	var total int64
	active := map[string]float64{}
	for n, s := range fs.members {
		if s.Prev > 0 || s.Cur > 0 || fs.asked[n] {
			active[n] = used(s)
		}
	}
	if _, ok := active[member]; !ok {
		active[member] = used(fs.members[member])
	}
	for n := range active {
		total += f.weight(n)
	}
	var owed float64
	for n, u := range active {
		if n == member {
			continue
		}
		share := float64(limit) * float64(f.weight(n)) / float64(total)
		owed += math.Max(0, share-u)
	}
	return max(0, limit-int64(math.Floor(owed)))
}

// noteFair records what a charge's answer says of member's counter, and
// that the member asked in this window: admitted or refused, it joins the
// roster (once per window and instance), so that a member refused while
// others borrow is owed its share everywhere.
func (l *Limiter) noteFair(ctx context.Context, now time.Time, r *rule, member string, c Charge, s State) {
	fs := l.fairOf(r)
	window := rosterWindow(c, now)
	fs.mu.Lock()
	if window == fs.window {
		fs.members[member] = s
	}
	if _, ok := fs.seen[member]; ok || len(fs.seen) < MaxFairMembers {
		fs.seen[member] = now
	}
	fs.asked[member] = true
	join := fs.joined[member] != window
	if join {
		fs.joined[member] = window
	}
	fs.mu.Unlock()
	if rs, ok := l.store.(Rosters); ok && join {
		_ = rs.JoinRoster(ctx, r.counter, window, member, now.Add(3*max(c.Period, time.Minute)))
	}
}

// refreshFairs brings what this instance knows of the fair-share rules
// among ms up to date.
func (l *Limiter) refreshFairs(ctx context.Context, now time.Time, ms []match) {
	for _, m := range ms {
		r := m.rule
		if r.FairShare == nil {
			continue
		}
		kind, limit := fairDimension(r)
		l.refreshFair(ctx, now, r, memberProto(now, r, m.child, kind, limit))
	}
}

// noteFairs records what a charge's answer says of fair-share members.
func (l *Limiter) noteFairs(ctx context.Context, now time.Time, charges []Charge, out Outcome) {
	for i := range charges {
		c := &charges[i]
		if c.fairMember && i < len(out.States) {
			l.noteFair(ctx, now, c.owner, c.member, *c, out.States[i])
		}
	}
}

// fairDimension is the dimension of rule r that shares fairly, and its
// limit in the rule's units.
func fairDimension(r *rule) (Kind, int64) {
	switch {
	case r.Bucket != nil && r.Bucket.Tokens:
		return KindTokens, r.Bucket.Capacity
	case r.Bucket != nil:
		return KindRequests, r.Bucket.Capacity
	case r.IsBudget():
		return KindCost, r.MaxCost
	case r.Period == Concurrent:
		return KindInFlight, r.MaxRequests
	case r.MaxRequests > 0:
		return KindRequests, r.MaxRequests
	}
	return KindTokens, r.MaxTokens
}
