package limiter

import (
	"strconv"
	"strings"
	"time"
)

// InFlightRetry is the Retry-After of a concurrency refusal. A slot frees
// when some request in flight completes, which no counter can predict; this
// is the interval at which a client should look again.
const InFlightRetry = time.Second

// Decision is the answer to one admission: admitted, or refused by a rule
// with an exact wait. Either way it carries the x-ratelimit-* values of the
// most restrictive matching rule.
type Decision struct {
	Allowed bool

	// Refused is what decided a refusal; nil when allowed.
	Refused *Refusal

	// Requests and Tokens are the x-ratelimit-*-requests and -tokens values
	// of the most restrictive matching rule in each dimension; zero when no
	// rule limits that dimension.
	Requests Quota
	Tokens   Quota
	// Budget is what the tightest matching budget leaves; unset when none
	// matched.
	Budget BudgetQuota

	// Shadow lists the shadow rules that would have refused the request.
	Shadow []Refusal

	// Lease is what the request holds until Complete: an in-flight slot or a
	// token reservation. Nil when it holds nothing.
	Lease *Lease
}

// Refusal says which rule refused a request, in which dimension, and when
// the same request would first be admitted if nothing else arrived.
type Refusal struct {
	Rule  Rule
	Child string // the child a per_child rule counted under
	Kind  Kind
	Limit int64 // the rule's limit in that dimension
	// Amount is what this request asked of that dimension.
	Amount int64
	// RetryAfter is the exact wait; meaningless when !Retryable.
	RetryAfter time.Duration
	// Retryable is false when the request is larger than the limit and no
	// wait admits it.
	Retryable bool
	// End is when a fixed window or a budget's period ends; zero for
	// others.
	End time.Time
	// Spent and Reserved split a budget's count: what settled requests
	// spent in the period, and what requests in flight or not yet settled
	// hold in reservations (micro-dollars). ReservedOnly says the budget
	// refused for its reservations alone: once they settle (they mostly
	// turn into less than they reserved) there is room for this request,
	// so RetryAfter is when they are expected back, not the period's end.
	Spent, Reserved int64
	ReservedOnly    bool

	// Burndown is what each output token counted for in Amount on a
	// window of Bedrock's quota (see Charge.Burndown); 0 for the standard
	// arithmetic, where it counts once.
	Burndown int64

	// charge and state are the refusing counter's, for RoomAt.
	charge *Charge
	state  State
}

// RoomAt returns what the refusing counter will leave at the instant at,
// in the units Amount counts, if nothing else arrives before then: its
// window moved on, its bucket refilled. It returns -1 when that cannot be
// known: a gauge (a slot frees when some request completes), a sharded
// counter (the others shards' room is not in the refusal). A request that
// would wait for a Retry-After can so tell whether the room then is
// already promised to others waiting before it.
func (r *Refusal) RoomAt(at time.Time) int64 {
	c, s := r.charge, r.state
	if c == nil || c.IsGauge() || layoutOf(c.Counter) > 1 {
		return -1
	}
	switch {
	case c.Shape == ShapeBucket:
		debt := max(0, s.Cur-at.UnixNano())
		return max(0, c.Limit-debt) / max(c.Unit, 1)
	case c.Shape == ShapeFixed:
		if !at.Before(c.End) {
			return c.Limit
		}
		return max(0, c.Limit-max(s.Cur, 0))
	}
	w, elapsed := windowAt(at, c.Period)
	prev, cur := s.Prev, s.Cur
	switch d := w - c.Counter.Window; {
	case d < 0:
	case d == 1:
		prev, cur = cur, 0
	case d > 1:
		prev, cur = 0, 0
	}
	return max(0, slidingCeiling(c.Limit, prev, 0, c.Period, elapsed)-max(cur, 0))
}

// IsBudget reports whether a budget refused.
func (r *Refusal) IsBudget() bool { return r.Kind == KindCost }

// Scope returns the scope of the refusing rule.
func (r *Refusal) Scope() Scope { return r.Rule.Scope }

// Subject returns what was limited, as the caller should read it: the rule's
// subject, or for a per_child rule the child path.
func (r *Refusal) Subject() string { return SubjectOf(r.Rule, r.Child) }

// SubjectOf returns what rule counts under child, as a caller reads it:
// the rule's subject; the child's path of a per_child rule; "k=v" for a
// tag counted by each value; the key's id for a key counted by each key.
func SubjectOf(rule Rule, child string) string {
	switch {
	case child == "":
		return rule.Subject
	case rule.Scope == ScopeTag:
		name, _, _ := strings.Cut(rule.Subject, "=")
		return name + "=" + child
	case rule.Scope == ScopeKey:
		return child
	case rule.Subject == "/":
		return "/" + child
	}
	return rule.Subject + "/" + child
}

// RetryAfterSeconds returns Retry-After in whole seconds, rounded up.
func (r *Refusal) RetryAfterSeconds() int64 {
	return int64((r.RetryAfter + time.Second - 1) / time.Second)
}

// Message explains the refusal in one sentence:
// "rate limit exceeded for /team/alpha: minute request limit of 100 reached".
func (r *Refusal) Message() string {
	subject := r.Subject()
	if r.Rule.Scope != ScopeUserPath {
		subject = r.Rule.Scope.String() + " " + subject
	}
	if r.IsBudget() {
		budget := r.periodWord() + " budget of $" + FormatUSD(r.Limit)
		switch {
		case !r.Retryable:
			return "request costing $" + FormatUSD(r.Amount) + " exceeds the " + budget + " for " + subject
		case r.ReservedOnly:
			return "budget reserved, not spent, for " + subject + ": the " + budget + " has $" + FormatUSD(r.Spent) +
				" spent and $" + FormatUSD(r.Reserved) + " reserved by requests in flight or not yet settled; this request would reserve $" +
				FormatUSD(r.Amount) + ": retry when they settle"
		}
		return "budget exhausted for " + subject + ": the " + budget + " has $" + FormatUSD(r.Spent) + " spent" +
			reservedNote(r.Reserved) + "; this request would reserve $" + FormatUSD(r.Amount)
	}
	limit := r.periodWord() + " " + r.Kind.noun() + " limit of " + strconv.FormatInt(r.Limit, 10)
	if _, bucket := r.Rule.Limit.(Bucket); bucket {
		limit = r.Kind.noun() + " bucket of " + strconv.FormatInt(r.Limit, 10)
	}
	if !r.Retryable {
		return "request of " + strconv.FormatInt(r.Amount, 10) + " " + r.Kind.unit() +
			" exceeds the " + limit + " for " + subject
	}
	return "rate limit exceeded for " + subject + ": " + limit + " reached"
}

// reservedNote adds what is reserved to a spent budget's message.
func reservedNote(reserved int64) string {
	if reserved <= 0 {
		return ""
	}
	return " and $" + FormatUSD(reserved) + " reserved"
}

// periodWord is the adjective of the refusing rule's period: "minute",
// "300-second", "concurrent", "daily" (a bucket's message names none).
func (r *Refusal) periodWord() string {
	switch lim := r.Rule.Limit.(type) {
	case Budget:
		return map[Calendar]string{CalendarHour: "hourly", CalendarDay: "daily", CalendarWeek: "weekly", CalendarMonth: "monthly"}[lim.Calendar]
	case Window:
		switch lim.Period {
		case Minute, Hour, Day:
			return PeriodName(lim.Period)
		}
		return strconv.FormatInt(int64(lim.Period/time.Second), 10) + "-second"
	case Gauge:
		if lim.Streams {
			return "streaming"
		}
	}
	return PeriodConcurrent
}

func (k Kind) noun() string {
	switch k {
	case KindTokens:
		return "token"
	case KindInputTokens:
		return "input token"
	case KindOutputTokens:
		return "output token"
	}
	return "request"
}

func (k Kind) unit() string {
	switch k {
	case KindTokens, KindInputTokens, KindOutputTokens:
		return "tokens"
	}
	return "requests"
}

// BudgetQuota is what a budget leaves, for the x-tollgate-budget-*
// headers: the tightest budget that matched.
type BudgetQuota struct {
	Rule      Rule
	Child     string
	Limit     int64 // micro-dollars per period
	Remaining int64 // micro-dollars, reservations of requests in flight deducted
	Reset     time.Time
}

// IsSet reports whether a budget matched.
func (b BudgetQuota) IsSet() bool { return b.Limit > 0 }

// Quota is one dimension's x-ratelimit-* values.
type Quota struct {
	Limit     int64
	Remaining int64
	// Reset is how long until the dimension is back at its full limit if
	// nothing else arrives. HasReset is false for in-flight limits, which
	// have no window.
	Reset    time.Duration
	HasReset bool
}

// IsSet reports whether a rule limits this dimension.
func (q Quota) IsSet() bool { return q.Limit > 0 }

// tighter reports whether q leaves less room than o: fewer units remaining
// is what refuses soonest; on a tie, the longer wait to reset.
func (q Quota) tighter(o Quota) bool {
	if !o.IsSet() {
		return true
	}
	if q.Remaining != o.Remaining {
		return q.Remaining < o.Remaining
	}
	return q.Reset > o.Reset
}

// FormatReset writes a reset duration as OpenAI does: "1s", "6m0s", "20ms";
// rounded up to the millisecond.
func FormatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	d = (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	return d.String()
}
