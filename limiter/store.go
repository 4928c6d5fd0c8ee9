package limiter

import (
	"context"
	"errors"
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
	}
	return "?"
}

// IsTokens reports whether the kind counts tokens, i.e. is settled against
// actual usage after the request.
func (k Kind) IsTokens() bool {
	return k == KindTokens || k == KindInputTokens || k == KindOutputTokens
}

// Counter names one stored number: one dimension of one rule's subject (or
// per-child subject), in one window, on one shard.
type Counter struct {
	Rule   string // the rule's key and generation, see Rule.Key
	Child  string // the child segment of a per_child rule, case folded
	Kind   Kind
	Shard  int
	Window int64 // window index since the Unix epoch; 0 for KindInFlight
}

// Previous returns the same counter one window earlier.
func (c Counter) Previous() Counter {
	c.Window--
	return c
}

// Charge asks a store to add Amount to a counter if the limit allows it.
type Charge struct {
	Counter Counter
	Period  time.Duration // the window length; Concurrent for KindInFlight
	Limit   int64         // the limit, or this shard's share of it
	Amount  int64

	owner *rule // the rule charged, when the limiter planned the charge
}

// Ceiling returns the largest value the counter's current window (or gauge)
// may hold for this charge to be admitted at now, given the final count of
// the previous window. It is negative when nothing admits the charge now.
//
// A store admits a charge exactly when the counter's current value is at
// most Ceiling: that is the one condition it has to evaluate atomically, and
// the only domain arithmetic it needs.
func (c *Charge) Ceiling(prev int64, now time.Time) int64 {
	if c.Period == Concurrent {
		return c.Limit - c.Amount
	}
	_, elapsed := windowAt(now, c.Period)
	return slidingCeiling(c.Limit, prev, c.Amount, c.Period, elapsed)
}

// WindowEnd returns when the charge's window closes (zero for gauges).
func (c *Charge) WindowEnd() time.Time {
	if c.Period == Concurrent {
		return time.Time{}
	}
	return time.Unix(0, (c.Counter.Window+1)*int64(c.Period))
}

// State is what a store knows of a counter.
type State struct {
	Prev int64 // the final count of the previous window; 0 for gauges
	Cur  int64 // the current window's count, or the gauge's value
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
}

// Lease is the record of one admitted request that holds something to give
// back or to settle: an in-flight slot, or a token reservation.
type Lease struct {
	ID        string
	ExpiresAt time.Time // after this the lease no longer holds its slots
	UserPath  string
	Provider  string
	Model     string
	Route     string
	// Reserved is what was charged to token windows at admission.
	Reserved Usage
	// Charges lists every counter the request charged; Settle uses the token
	// counters among them, release the in-flight ones.
	Charges []Charge
}

// Usage is a count of tokens.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	// CachedInputTokens are input tokens served from a provider's prompt
	// cache, recorded apart; they are not part of InputTokens.
	CachedInputTokens int64
	// Exact is false when the count may be short: the stream broke, the
	// provider reported nothing, the process died. Such a count never
	// refunds a reservation.
	Exact bool
}

// Total returns input + output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Settlement is the correction of one completed lease: what it reserved
// against what it used.
type Settlement struct {
	Lease *Lease
	Used  Usage
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
// Time is the caller's: now decides windows, ceilings and lease expiry, and
// a store never reads the clock for a decision.
type Store interface {
	// Charge applies all charges or none. Each is admitted when its
	// counter's current value is at most Ceiling. When all are admitted and
	// lease is not nil, the lease is recorded in the same call and holds the
	// in-flight charges until Complete or its expiry.
	Charge(ctx context.Context, now time.Time, charges []Charge, lease *Lease) (Outcome, error)

	// Complete records a lease's actual usage for settlement and releases
	// its in-flight charges. Completing a lease twice, or one that expired,
	// changes nothing the second time.
	Complete(ctx context.Context, now time.Time, leaseID string, used Usage) error

	// Settle corrects the token counters each settlement's lease charged by
	// used − reserved, exactly once per lease however often it is called
	// with it. Refunds are skipped when the usage is not exact; overshoots
	// are always charged, even past the limit. It returns how many
	// settlements it applied now: not those applied before, nor those with
	// nothing to correct.
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
// token charge of the lease, used − reserved in that charge's dimension;
// negative deltas only when the usage is exact. The result has one entry per
// lease charge (0 for charges that are not corrected).
func Corrections(s Settlement) []int64 {
	out := make([]int64, len(s.Lease.Charges))
	for i, c := range s.Lease.Charges {
		var used, reserved int64
		switch c.Counter.Kind {
		case KindTokens:
			used, reserved = s.Used.Total(), s.Lease.Reserved.Total()
		case KindInputTokens:
			used, reserved = s.Used.InputTokens, s.Lease.Reserved.InputTokens
		case KindOutputTokens:
			used, reserved = s.Used.OutputTokens, s.Lease.Reserved.OutputTokens
		default:
			continue
		}
		d := used - reserved
		if d < 0 && !s.Used.Exact {
			d = 0
		}
		out[i] = d
	}
	return out
}
