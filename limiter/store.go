package limiter

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Kind is the dimension a counter measures.
type Kind uint8

const (
	KindRequests     Kind = iota + 1 // requests in a window
	KindTokens                       // input + output tokens in a window
	KindInputTokens                  // input tokens in a window
	KindOutputTokens                 // output tokens in a window
	KindInFlight                     // requests in flight (a gauge, no window)
	KindCost                         // micro-dollars in a budget's period
)

func (k Kind) String() string {
	switch k {
	case KindRequests:
		return "req"
	case KindTokens:
		return "tok"
	case KindInputTokens:
		return "in"
	case KindOutputTokens:
		return "out"
	case KindInFlight:
		return "fly"
	case KindCost:
		return "usd"
	}
	return "?"
}

// IsTokens reports whether the kind counts tokens.
func (k Kind) IsTokens() bool {
	return k == KindTokens || k == KindInputTokens || k == KindOutputTokens
}

// IsSettled reports whether the kind's charges are estimates corrected to
// actual usage after the request: tokens and money.
func (k Kind) IsSettled() bool { return k.IsTokens() || k == KindCost }

// Counter names one stored number: one dimension of one rule's subject (or
// per-child subject), in one window, on one shard.
type Counter struct {
	Rule  string // the rule's key and generation, see Rule.Key
	Child string // the child segment of a per_child rule, case folded
	// Window is the window's index since the Unix epoch, or for a
	// calendar period its start in Unix seconds; 0 for gauges and buckets.
	// (Stored counters are named by it: its meaning per kind is fixed.)
	Window int64
	Shard  int
	// Shards is the layout the counter is a shard of: how many shards the
	// rule's counter was split into (0 when it is not split).
	Shards int
	// Kind is last, so that the fields after the strings are one run of
	// memory with no padding inside: a map keyed by counters hashes it in
	// one call.
	Kind Kind
}

// Previous returns the same counter one window earlier.
func (c Counter) Previous() Counter {
	c.Window--
	return c
}

// Charge asks a store to add Amount to a counter if the limit allows it.
//
// A store admits a charge when the counter's value is at most Ceiling, and
// then sets it to max(value, Floor) + Amount. Floor is 0 but for buckets,
// so for every other shape that is value + Amount.
type Charge struct {
	Counter Counter
	// Period is the window length; 0 for a gauge's (KindInFlight). For a
	// calendar period or a bucket it is the longest the counter counts
	// for, which only expiries use.
	Period time.Duration
	// End is when a fixed window closes (ShapeFixed).
	End time.Time
	// Floor is a bucket's now, in Unix nanoseconds; Unit its nanoseconds
	// of refill per unit, which settlements multiply corrections by.
	Floor int64
	Unit  int64
	Limit int64 // the limit, or this shard's share of it; a bucket's capacity in ns
	// Amount is what the charge adds: units, or a bucket's units × Unit.
	Amount int64
	// Burndown, set on the token charges of a QuotaBedrock rule, is the
	// output burndown the request was charged at (≥ 1): the settlement
	// corrects the charge from input + reserved output × Burndown to
	// uncached input + output × Burndown. 0 is the standard arithmetic.
	// A store records it with the lease, so settlement needs nothing else.
	Burndown int64
	// Prev, when set, replaces Counter.Previous() as the previous
	// window's count. It is set in the first window of a new shard
	// layout, whose previous window was counted by the old one.
	Prev *PrevLayout

	owner *rule // the rule charged, when the limiter planned the charge
	// settleWait is a budget charge's Limiter.SettleWait (see budgetWait).
	settleWait time.Duration
	whole      int64 // the limit the shares of a sharded charge add up to
	units      int64 // what a bucket charge asks, in the rule's units
	// member is the fair-share member, on the rule's charge and on the
	// member's own counter's; fairMember marks the latter.
	member     string
	Shape      Shape
	fairMember bool
}

// PrevLayout is a charge's previous window as an old shard layout counted
// it: the sum of Counters times Share (numerator, denominator), rounded
// up.
type PrevLayout struct {
	Counters []Counter
	Share    [2]int64
}

// shadow reports whether the charge is a shadow rule's: admitted whatever
// its count. A fair-share member's own counter is never one.
func (c *Charge) shadow() bool { return c.owner != nil && c.owner.Shadow && !c.fairMember }

// Owner returns the rule the limiter planned the charge for; false for a
// charge planned elsewhere (a test's, one read back from a store).
func (c *Charge) Owner() (Rule, bool) {
	if c.owner == nil {
		return Rule{}, false
	}
	return c.owner.Rule, true
}

// Member returns the fair-share member whose own counter the charge is;
// false for a rule's own charges.
func (c *Charge) Member() (string, bool) { return c.member, c.fairMember }

// IsGauge reports whether the charge takes a slot of a gauge (KindInFlight):
// held by its lease, given back at completion or expiry, with no window.
func (c *Charge) IsGauge() bool { return c.Counter.Kind == KindInFlight }

// Sliding reports whether the charge's counter is read with its previous
// window's count.
func (c *Charge) Sliding() bool { return !c.IsGauge() && c.Shape == ShapeSliding }

// PrevOf returns the previous window's count of c from the counts of its
// Prev.Counters (in order): their sum times Prev.Share, rounded up.
func (c *Charge) PrevOf(counts []int64) int64 {
	var sum int64
	for _, v := range counts {
		sum = SatAdd(sum, max(v, 0))
	}
	if c.Prev == nil {
		return sum
	}
	num, den := c.Prev.Share[0], c.Prev.Share[1]
	if den <= 0 || num >= den {
		return sum
	}
	hi, lo := bits.Mul64(uint64(sum), uint64(max(num, 0)))
	q, r := bits.Div64(hi, lo, uint64(den))
	if r > 0 {
		q++
	}
	return int64(q)
}

// Ceiling returns the largest value the counter's current window (or gauge)
// may hold for this charge to be admitted at now, given the final count of
// the previous window. It is negative when nothing admits the charge now.
//
// A store admits a charge exactly when the counter's current value is at
// most Ceiling: that is the one condition it has to evaluate atomically, and
// the only domain arithmetic it needs.
//
// A shadow rule's charge is admitted whatever its counter holds (a gauge
// up to MaxSlotsPerShard, what one item may hold); the limiter compares
// the count with the real ceiling afterwards.
func (c *Charge) Ceiling(prev int64, now time.Time) int64 {
	if c.shadow() {
		if c.IsGauge() {
			return MaxSlotsPerShard - c.Amount
		}
		return math.MaxInt64 - c.Amount
	}
	return c.ceiling(prev, now)
}

// ceiling is Ceiling for the rule's real limit.
func (c *Charge) ceiling(prev int64, now time.Time) int64 {
	switch {
	case c.IsGauge(), c.Shape == ShapeFixed:
		return c.Limit - c.Amount
	case c.Shape == ShapeBucket:
		return bucketCeiling(c.Floor, c.Limit, c.Amount)
	}
	return slidingCeiling(c.Limit, prev, c.Amount, c.Period, c.elapsed(now))
}

// WindowEnd returns when the charge's window closes: End for a fixed
// window, when a bucket would be full again after this charge, zero for
// gauges.
func (c *Charge) WindowEnd() time.Time {
	switch {
	case c.IsGauge():
		return time.Time{}
	case c.Shape == ShapeBucket:
		return time.Unix(0, SatAdd(c.Floor, SatAdd(c.Limit, c.Amount)))
	case !c.End.IsZero():
		return c.End
	}
	return time.Unix(0, (c.Counter.Window+1)*int64(c.Period))
}

// State is what a store knows of a counter.
type State struct {
	Prev int64 // the final count of the previous window; 0 for gauges
	Cur  int64 // the current window's count, or the gauge's value
	// Reserved is, for a budget's counter, the part of Cur that requests
	// not yet settled reserved.
	Reserved int64
	// Refused is set on a refused outcome for the charges whose condition
	// failed.
	Refused bool
}

// Outcome is a store's answer to a charge.
type Outcome struct {
	Admitted bool
	// States has one entry per charge, in order. When admitted, each holds
	// the counter after the charge. When refused, each holds the counter
	// without this request's amount (what was found, or what remained after
	// compensation), and Refused marks the charges whose condition failed.
	States []State
	// Reclaimed is set on a refusal after which the store gave back slots
	// that no request holds any more (leases past their expiry, or slots
	// whose lease ended without releasing them): the same charges, under a
	// new lease, may be admitted now.
	Reclaimed bool
}

// Lease is the record of one admitted request that holds something to give
// back or to settle: an in-flight slot, or a token reservation.
type Lease struct {
	// ID names the lease: unique, at most MaxLeaseIDLen bytes.
	ID string
	// AdmittedAt is the instant of the admission.
	AdmittedAt time.Time
	ExpiresAt  time.Time // after this the lease no longer holds its slots; Renew extends it
	UserPath   string
	Provider   string
	Model      string
	Route      string
	Key        string // the managed key's id; "" for none
	// Reserved is what was charged to token windows at admission.
	Reserved Usage
	// Price is what the request's tokens cost, for budgets: their charge
	// is Reserved at Price, settled to the usage at Price.
	Price Price
	// Charges lists every counter the request charged; Settle uses the token
	// counters among them, release the in-flight ones.
	Charges []Charge
	// MaxStreamDuration, when set, is how long the stream the lease
	// admitted may run: the shortest max_stream_duration of the
	// max_streams rules that admitted it (the gateway's, not stored).
	MaxStreamDuration time.Duration
}

// HoldsSlots reports whether the lease holds in-flight slots (a gauge's
// charge): slots its completion or expiry gives back and its renewals
// keep. A nil lease holds none.
func (l *Lease) HoldsSlots() bool {
	return l != nil && slices.ContainsFunc(l.Charges, func(c Charge) bool { return c.Counter.Kind == KindInFlight })
}

// Usage is a count of tokens.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	// CachedInputTokens are input tokens served from a provider's prompt
	// cache. CachedInInput says InputTokens includes them (OpenAI and
	// Gemini count them towards their limits); otherwise they are apart
	// (Anthropic). Either way a budget charges them at the cached price.
	CachedInputTokens int64
	CachedInInput     bool
	// CacheWriteInputTokens are the input tokens written to a provider's
	// prompt cache, a part of InputTokens (as Anthropic and Bedrock count
	// them towards their limits).
	CacheWriteInputTokens int64
	// Exact is false when the count may be short: the stream broke, the
	// provider reported nothing, the process died. Such a count never
	// refunds a reservation.
	Exact bool
}

// Total returns input + output tokens, saturated.
func (u Usage) Total() int64 { return SatAdd(u.InputTokens, u.OutputTokens) }

// Clamped returns the usage with every count bounded to 0..MaxAmount: a
// usage report comes from upstream and is input like any other.
func (u Usage) Clamped() Usage {
	u.InputTokens = clampAmount(u.InputTokens)
	u.OutputTokens = clampAmount(u.OutputTokens)
	u.CachedInputTokens = clampAmount(u.CachedInputTokens)
	u.CacheWriteInputTokens = min(clampAmount(u.CacheWriteInputTokens), u.InputTokens)
	return u
}

// Settlement is the correction of one completed lease: what it reserved
// against what it used.
type Settlement struct {
	Lease *Lease
	Used  Usage
	// Position is where the settlement was read, when it was read from an
	// ordered log of completions (a stream shard); zero otherwise.
	Position Position
	// Applied is set by Store.Settle on the settlements it applied in
	// that call (not those applied before, nor those with nothing to
	// correct): what is learned from a settlement is learned once.
	Applied bool
}

// Position is a settlement's place in an ordered log of completions, in
// which each lease completes once. A store may settle a log's settlements
// exactly once by remembering how far along the log it has applied them,
// instead of remembering every lease: so a caller passes a log's
// settlements in the log's order, and one it passed that was not applied
// again, with every one after it, before any later one (the reconciler
// does: it applies the records after its checkpoint in order, and commits
// the checkpoint only after they were applied). Settlements without a
// position are settled once per lease id.
type Position struct {
	Log   string // names the log; "" for no position
	Order string // the place in the log; places compare as strings
}

// Store keeps counters and leases. Implementations live in infra/; every one
// runs the behaviour suite in limiter/storetest.
//
// A store is safe for concurrent use, also across processes sharing the same
// backend. It returns an error only when the backend fails: a refusal is an
// Outcome, never an error. Backend errors wrap ErrStoreUnavailable (cannot
// reach or was throttled after retries) or ErrContention (conflicting
// writes persisted after retries), so callers can choose with errors.Is.
//
// Every write that can be sent twice (a retry after a lost answer) is
// idempotent or verified: a slot is taken and given back once per lease
// however often the call is repeated, and a counter's ADD is never resent
// blindly. A store refuses a negative amount (ErrInvalidAmount) and never
// lets a counter or a gauge go below zero.
//
// Time is the caller's: now decides windows, ceilings and lease expiry, and
// a store never reads the clock for a decision.
type Store interface {
	// Charge applies all charges or none. Each is admitted when its
	// counter's current value is at most Ceiling. When all are admitted and
	// lease is not nil, the lease is recorded in the same call and holds the
	// in-flight charges until Complete or its expiry. The store uses
	// charges only until it returns (the limiter plans the next admission
	// in them); the lease's own Charges it may keep.
	Charge(ctx context.Context, now time.Time, charges []Charge, lease *Lease) (Outcome, error)

	// Complete records a lease's actual usage for settlement and releases
	// its in-flight charges. It is idempotent: completing a lease again
	// changes nothing more. Completing a lease that expired still records
	// its usage, for settlement; its slots were released at expiry.
	Complete(ctx context.Context, now time.Time, lease *Lease, used Usage) error

	// Renew extends an active lease's expiry to until, so a long request
	// keeps its slots. It returns false when the lease is no longer active
	// at now (completed, or expired and its slots released).
	Renew(ctx context.Context, now time.Time, lease *Lease, until time.Time) (bool, error)

	// Settle corrects the token counters each settlement's lease charged by
	// used − reserved, exactly once per lease however often it is called
	// with it. Refunds are skipped when the usage is not exact; overshoots
	// are always charged, even past the limit. It returns how many
	// settlements it applied now, not those applied before, nor those with
	// nothing to correct, and marks each of them Applied.
	Settle(ctx context.Context, settlements []Settlement) (int, error)

	// Read returns the states of counters without changing them.
	Read(ctx context.Context, now time.Time, charges []Charge) ([]State, error)
}

// Errors a Store wraps.
var (
	ErrStoreUnavailable = errors.New("limit store unavailable")
	ErrContention       = errors.New("limit store contention")
)

// Corrections returns the per-charge deltas a settlement applies: for each
// token counter the lease charged, used − reserved in that counter's
// dimension (on a charge with a Burndown, Bedrock's: uncached input +
// output × Burndown − (reserved input + reserved output × Burndown), so
// cache reads and unused output are given back); for a budget, the actual
// cost less the reserved cost (at the lease's price); for a token bucket,
// that many tokens of refill time.
// Negative deltas only when the usage is exact. The result has one entry
// per lease charge (0 for charges that are not corrected).
//
// A charge split over several shards of one rule is corrected once: an
// overshoot goes to its first part, a refund is taken from its parts in
// order, each at most what that part charged, so no shard's counter is
// refunded more than it was charged.
func Corrections(s Settlement) []int64 {
	out := make([]int64, len(s.Lease.Charges))
	used := s.Used.Clamped()
	done := make([]bool, len(s.Lease.Charges))
	for i, c := range s.Lease.Charges {
		if done[i] {
			continue
		}
		var u, reserved int64
		switch c.Counter.Kind {
		case KindTokens:
			u, reserved = used.Total(), SatAdd(s.Lease.Reserved.InputTokens, s.Lease.Reserved.OutputTokens)
			if c.Burndown > 0 {
				u = bedrockTokens(used.uncachedInput(), used.OutputTokens, c.Burndown)
				reserved = bedrockTokens(s.Lease.Reserved.InputTokens, s.Lease.Reserved.OutputTokens, c.Burndown)
			}
		case KindInputTokens:
			u, reserved = used.InputTokens, s.Lease.Reserved.InputTokens
		case KindOutputTokens:
			u, reserved = used.OutputTokens, s.Lease.Reserved.OutputTokens
		case KindCost:
			u, reserved = s.Lease.Price.Cost(used), s.Lease.reservedCost()
		default:
			continue
		}
		d := u - reserved
		if d < 0 && !used.Exact {
			d = 0
		}
		if c.Shape == ShapeBucket {
			done[i] = true
			if d < 0 {
				out[i] = -SatMul(-d, c.Unit)
			} else {
				out[i] = SatMul(d, c.Unit)
			}
			continue
		}
		// The parts of one split charge: same counter but for the shard.
		for j := i; j < len(s.Lease.Charges); j++ {
			p := s.Lease.Charges[j]
			if done[j] || !samePart(c.Counter, p.Counter) {
				continue
			}
			done[j] = true
			switch {
			case d > 0 && j == i:
				out[j] = d
			case d < 0:
				take := max(d, -p.Amount)
				out[j] = take
				d -= take
			}
		}
	}
	return out
}

// Released returns, per lease charge, the reservation a settlement turns
// into spending on a budget's counter: each budget charge's amount. Stores
// keep what is reserved apart (State.Reserved), so a budget can show spent
// and reserved money.
func Released(s Settlement) []int64 {
	out := make([]int64, len(s.Lease.Charges))
	for i, c := range s.Lease.Charges {
		if c.Counter.Kind == KindCost {
			out[i] = c.Amount
		}
	}
	return out
}

// NeedsSettling reports whether settling s changes anything: a correction
// or a reservation to release.
func NeedsSettling(s Settlement) bool {
	for _, c := range s.Lease.Charges {
		if c.Counter.Kind == KindCost && c.Amount > 0 {
			return true
		}
	}
	return slices.ContainsFunc(Corrections(s), func(d int64) bool { return d != 0 })
}

// samePart reports whether two counters are shards of one rule's counter
// in one window.
func samePart(a, b Counter) bool {
	a.Shard, b.Shard = 0, 0
	return a == b
}
