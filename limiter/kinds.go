package limiter

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Limit is what a rule limits and how it counts: one of
//
//   - Window: requests and tokens per period, by the sliding estimate or in
//     fixed windows;
//   - Gauge: requests in flight;
//   - Bucket: a token bucket of requests or tokens;
//   - Budget: money per calendar period.
//
// The set is closed (the methods are unexported): a rule is exactly one
// kind and has that kind's parameters only, so a concurrency rule cannot
// have a token limit nor a bucket a period. Writers that take every
// kind's fields in one flat form (a config file's limits, the admin API's
// body, a stored rule item) sort them into a kind where they read them,
// and report what the kind has not with Misplaced.
type Limit interface {
	// keyPeriod is the last part of the rule's key: a window's seconds,
	// "c" for a gauge, "b" or "bt" for a bucket, "$" and a budget's
	// calendar period.
	keyPeriod() string
	// periodName names the period as config writes it (Rule.PeriodName).
	periodName() string
	// problems lists what is wrong with the limit on rule r, each written
	// "field: why".
	problems(r *Rule) []error
	// limitOf is the limit in dimension k, in the rule's units.
	limitOf(k Kind) int64
	// dimensions are the dimensions the limit can count, in the order
	// Usage lists them; a window's include those it sets no limit in.
	dimensions() []Kind
	// fairDimension is the dimension that shares fairly, and its limit.
	fairDimension() (Kind, int64)
	// span is the Period of the limit's charges: a window's length; a
	// bucket's fill time or a budget's longest period, in whole seconds,
	// which only expiries use; 0 for a gauge.
	span() time.Duration
}

// Window limits requests and tokens per Period, a whole number of
// seconds: by the sliding estimate of the current and previous windows
// (window.go), or, Fixed, in windows aligned to the Unix epoch, each
// starting empty. A zero maximum is no limit on that dimension.
type Window struct {
	Period time.Duration
	Fixed  bool

	MaxRequests     int64 // requests per window
	MaxTokens       int64 // input + output tokens per window
	MaxInputTokens  int64 // input tokens per window
	MaxOutputTokens int64 // output tokens per window

	// Quota is the arithmetic of MaxTokens: tollgate's own, or an
	// upstream's (QuotaBedrock). Editing it keeps the counters.
	Quota QuotaArithmetic
}

// Gauge limits the requests in flight: each admitted request holds one of
// MaxInFlight slots until it completes or its lease expires. Zero is no
// limit. With Streams it counts streaming requests only (config's
// max_streams: its own counter, beside the subject's concurrent one), and
// MaxDuration, when set, is how long a stream it admits may run (the
// lease's MaxStreamDuration).
type Gauge struct {
	MaxInFlight int64
	Streams     bool
	MaxDuration time.Duration
}

// Budget limits money: MaxCost micro-dollars per Calendar period in
// Location (nil: UTC), reserved at admission at the request's price and
// settled to the actual cost.
type Budget struct {
	MaxCost  int64
	Calendar Calendar
	Location *time.Location
}

// Bucket limits by a token bucket: it holds Capacity units and refills
// RefillPerSecond of them each second, so a burst of Capacity passes at
// once and then RefillPerSecond a second. Its arithmetic is in shape.go.
type Bucket struct {
	// Tokens makes the bucket count tokens (input + output, reserved and
	// settled like a token window); otherwise it counts requests.
	Tokens          bool
	Capacity        int64
	RefillPerSecond float64
}

// windowDimensions are a window's dimensions, in the order Usage lists
// them.
var windowDimensions = []Kind{KindRequests, KindTokens, KindInputTokens, KindOutputTokens}

func (w Window) keyPeriod() string  { return strconv.FormatInt(int64(w.Period/time.Second), 10) }
func (w Window) periodName() string { return PeriodName(w.Period) }
func (w Window) dimensions() []Kind { return windowDimensions }
func (w Window) span() time.Duration {
	return w.Period
}

func (w Window) limitOf(k Kind) int64 {
	switch k {
	case KindRequests:
		return w.MaxRequests
	case KindTokens:
		return w.MaxTokens
	case KindInputTokens:
		return w.MaxInputTokens
	case KindOutputTokens:
		return w.MaxOutputTokens
	}
	return 0
}

// fairDimension is the request limit, or the token limit when there is
// none.
func (w Window) fairDimension() (Kind, int64) {
	if w.MaxRequests > 0 {
		return KindRequests, w.MaxRequests
	}
	return KindTokens, w.MaxTokens
}

// countsTokens reports whether the window limits tokens, which settle.
func (w Window) countsTokens() bool {
	return w.MaxTokens > 0 || w.MaxInputTokens > 0 || w.MaxOutputTokens > 0
}

func (w Window) problems(r *Rule) []error {
	errs := priorityProblems(r)
	if r.Shadow && r.Shards > 1 {
		errs = append(errs, errShadowSharded)
	}
	if w.Fixed && r.Shards > 1 {
		errs = append(errs, errors.New("shards: only sliding windows and concurrency rules can be sharded"))
	}
	if w.Period < 0 {
		errs = append(errs, fmt.Errorf("period: negative period %s", w.Period))
	} else if w.Period < time.Second || w.Period%time.Second != 0 {
		errs = append(errs, fmt.Errorf("period_seconds: %s is not a whole number of seconds ≥ 1", w.Period))
	}
	errs = append(errs, w.LimitProblems()...)
	errs = append(errs, w.quotaProblems(r.Scope)...)
	return append(errs, shardProblems(r)...)
}

// LimitProblems checks the window's four maxima alone (0 to MaxAmount),
// for a writer whose rule has no period to check them with.
func (w Window) LimitProblems() []error {
	var errs []error
	for _, f := range [...]struct {
		name string
		v    int64
	}{
		{"max_requests", w.MaxRequests},
		{"max_tokens", w.MaxTokens},
		{"max_input_tokens", w.MaxInputTokens},
		{"max_output_tokens", w.MaxOutputTokens},
	} {
		errs = append(errs, amountProblems(f.name, f.v)...)
	}
	return errs
}

func (g Gauge) keyPeriod() string {
	if g.Streams {
		return "cs"
	}
	return "c"
}

func (g Gauge) periodName() string {
	if g.Streams {
		return PeriodStreams
	}
	return PeriodConcurrent
}

func (g Gauge) dimensions() []Kind           { return gaugeDimensions }
func (g Gauge) span() time.Duration          { return 0 }
func (g Gauge) fairDimension() (Kind, int64) { return KindInFlight, g.MaxInFlight }
func (g Gauge) limitOf(k Kind) int64         { return g.MaxInFlight }

var (
	gaugeDimensions  = []Kind{KindInFlight}
	costDimensions   = []Kind{KindCost}
	requestDimension = []Kind{KindRequests}
	tokenDimension   = []Kind{KindTokens}
)

func (g Gauge) problems(r *Rule) []error {
	errs := priorityProblems(r)
	if r.Shadow && r.Shards > 1 {
		errs = append(errs, errShadowSharded)
	}
	errs = append(errs, amountProblems("max_requests", g.MaxInFlight)...)
	errs = append(errs, shardProblems(r)...)
	switch {
	case g.MaxDuration != 0 && !g.Streams:
		errs = append(errs, errors.New("max_stream_duration: bounds the streams of a max_streams limit"))
	case g.MaxDuration < 0:
		errs = append(errs, fmt.Errorf("max_stream_duration: negative duration %v", g.MaxDuration))
	}
	if g.MaxInFlight > int64(MaxSlotsPerShard)*int64(max(r.Shards, 1)) {
		errs = append(errs, fmt.Errorf("max_requests: %d in flight is more than %d per shard; set shards to at least %d",
			g.MaxInFlight, MaxSlotsPerShard, (g.MaxInFlight+MaxSlotsPerShard-1)/MaxSlotsPerShard))
	}
	return errs
}

func (b Bucket) keyPeriod() string {
	if b.Tokens {
		return "bt"
	}
	return "b"
}

func (b Bucket) periodName() string { return "bucket" }
func (b Bucket) limitOf(Kind) int64 { return b.Capacity }
func (b Bucket) fairDimension() (Kind, int64) {
	if b.Tokens {
		return KindTokens, b.Capacity
	}
	return KindRequests, b.Capacity
}

func (b Bucket) dimensions() []Kind {
	if b.Tokens {
		return tokenDimension
	}
	return requestDimension
}

// span is the time the bucket takes to fill from empty, in whole seconds
// and at least one.
func (b Bucket) span() time.Duration {
	return max(time.Second, (time.Duration(b.fill())+time.Second-1)/time.Second*time.Second)
}

func (b Bucket) problems(r *Rule) []error {
	errs := b.ownProblems()
	errs = append(errs, priorityProblems(r)...)
	if r.Shards > 1 {
		errs = append(errs, errors.New("shards: a bucket cannot be sharded"))
	}
	return errs
}

func (b Budget) keyPeriod() string            { return "$" + b.Calendar.String() }
func (b Budget) periodName() string           { return b.Calendar.String() }
func (b Budget) dimensions() []Kind           { return costDimensions }
func (b Budget) span() time.Duration          { return b.Calendar.longest() }
func (b Budget) fairDimension() (Kind, int64) { return KindCost, b.MaxCost }
func (b Budget) limitOf(Kind) int64           { return b.MaxCost }

func (b Budget) problems(r *Rule) []error {
	var errs []error
	if b.Calendar < CalendarHour || b.Calendar > CalendarMonth {
		errs = append(errs, errors.New("period: a budget's period is hour, day, week or month"))
	}
	switch {
	case b.MaxCost <= 0:
		errs = append(errs, errors.New("amount_usd: a budget needs an amount above 0"))
	case b.MaxCost > MaxAmount:
		errs = append(errs, fmt.Errorf("amount_usd: %s is above the largest budget, %s", FormatUSD(b.MaxCost), FormatUSD(MaxAmount)))
	}
	if r.Shards > 1 {
		errs = append(errs, errors.New("shards: a budget cannot be sharded"))
	}
	if r.Priority != 0 || r.Always {
		errs = append(errs, errors.New("priority: budgets always apply; they take no priority"))
	}
	return errs
}

var errShadowSharded = errors.New("shadow: a sharded rule cannot be a shadow (a shard's refusal is not the rule's)")

func priorityProblems(r *Rule) []error {
	if r.Priority < -1000 || r.Priority > 1000 {
		return []error{fmt.Errorf("priority: %d is outside -1000..1000", r.Priority)}
	}
	return nil
}

// amountProblems checks a limit: 0 (none) to MaxAmount.
func amountProblems(field string, v int64) []error {
	switch {
	case v < 0:
		return []error{fmt.Errorf("%s: negative limit %d", field, v)}
	case v > MaxAmount:
		return []error{fmt.Errorf("%s: %d is above the largest limit, %d", field, v, MaxAmount)}
	}
	return nil
}

// shardProblems checks the shards and layout history of a window or a
// gauge, the kinds that shard.
func shardProblems(r *Rule) []error {
	var errs []error
	if r.Shards < 0 || r.Shards > 64 {
		errs = append(errs, fmt.Errorf("shards: %d is outside 0..64", r.Shards))
	}
	for i, h := range r.ShardHistory {
		if h.Shards < 0 || h.Shards > 64 || (i > 0 && h.Since.Before(r.ShardHistory[i-1].Since)) {
			errs = append(errs, fmt.Errorf("shards: layout history entry %d (%d from %v) is out of order or range", i, h.Shards, h.Since))
		}
	}
	if len(r.ShardHistory) > maxShardHistory {
		errs = append(errs, fmt.Errorf("shards: %d layouts in the history, at most %d", len(r.ShardHistory), maxShardHistory))
	}
	return errs
}

// Misplaced lists, as problems ("field: why"), the fields of w that a limit
// of another kind has not: for a writer that takes every kind's fields in
// one flat form (a config file's limits entry, the admin API's body, a
// stored rule item) and found them beside a gauge (period: concurrent,
// whose MaxRequests is its MaxInFlight), a bucket or a budget. w's Period
// is not looked at.
func Misplaced(w Window, on Limit) []error {
	var errs []error
	tokens := w.MaxTokens != 0 || w.MaxInputTokens != 0 || w.MaxOutputTokens != 0
	switch on.(type) {
	case Gauge:
		if tokens {
			errs = append(errs, errors.New("max_tokens: a concurrent rule limits requests in flight, not tokens"))
		}
		if w.Fixed {
			errs = append(errs, errors.New("window: a concurrent rule has no window"))
		}
		if w.Quota == QuotaBedrock {
			errs = append(errs, errors.New("quota: bedrock is for token windows, not concurrency rules"))
		}
		return errs
	case Bucket:
		if tokens || w.MaxRequests != 0 {
			errs = append(errs, errors.New("capacity: a bucket rule has a capacity and a refill, not window limits"))
		}
		if w.Fixed {
			errs = append(errs, errors.New("window: a bucket has no window"))
		}
	case Budget:
		if tokens || w.MaxRequests != 0 {
			errs = append(errs, errors.New("amount_usd: a budget limits money only; put request and token limits in a rate-limit rule"))
		}
		if w.Fixed {
			errs = append(errs, errors.New("window: a budget has no window"))
		}
	default: // a window has every field of a window
		return nil
	}
	if w.Quota == QuotaBedrock {
		errs = append(errs, errors.New("quota: bedrock is for token windows, not buckets or budgets"))
	}
	return errs
}
