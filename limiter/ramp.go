package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// A Ramp grows a provider or model rule's limit for a new deployment: from
// Start by Step every Every, until Max (the rule's own limit). It holds,
// not growing, through an interval in which the upstream answered 429.
// The ramped limit applies to the rule's request limit, or its token limit
// when it has none; other limits of the rule scale with it.
type Ramp struct {
	Start, Step int64
	Every       time.Duration
	Max         int64
}

// RampState is where a ramp stands: its current limit and when that
// limit was set, shared by every instance through the config store.
type RampState struct {
	Level int64
	At    time.Time
}

// Next returns the state at now from s: a ramp not started starts at
// Start; once Every has passed since the last step, it steps up by Step
// (to at most Max) when the interval was healthy, else holds at its level
// for another interval. It steps at most once per call, so an instance
// that has not looked for a long time catches up one step per call.
func (r Ramp) Next(s RampState, now time.Time, healthy bool) RampState {
	if s.Level <= 0 {
		return RampState{Level: min(r.Start, r.Max), At: now}
	}
	if s.Level >= r.Max || now.Before(s.At.Add(r.Every)) {
		return s
	}
	if !healthy {
		return RampState{Level: s.Level, At: now}
	}
	return RampState{Level: min(SatAdd(s.Level, r.Step), r.Max), At: s.At.Add(r.Every)}
}

// Due reports whether Next could change s at now.
func (r Ramp) Due(s RampState, now time.Time) bool {
	return s.Level <= 0 || s.Level < r.Max && !now.Before(s.At.Add(r.Every))
}

// Ramped returns the rule with its window's limits at level of its ramp:
// the ramped dimension at level, the others scaled in proportion (rounded
// up).
func (r Rule) Ramped(level int64) Rule {
	w, ok := r.Limit.(Window)
	if r.Ramp == nil || !ok || level <= 0 || level >= r.Ramp.Max {
		return r
	}
	scale := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(1, mulDivCeil(v, level, r.Ramp.Max))
	}
	if w.MaxRequests > 0 {
		w.MaxRequests = level
		w.MaxTokens, w.MaxInputTokens, w.MaxOutputTokens = scale(w.MaxTokens), scale(w.MaxInputTokens), scale(w.MaxOutputTokens)
	} else {
		w.MaxTokens = level
		w.MaxInputTokens, w.MaxOutputTokens = scale(w.MaxInputTokens), scale(w.MaxOutputTokens)
	}
	r.Limit = w
	return r
}

// mulDivCeil is a·b/c rounded up, exactly for any non-negative a and b
// and positive c (a 128-bit product), at most math.MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64 // the quotient does not fit
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r > 0 {
		q++
	}
	return int64(min(q, math.MaxInt64))
}

func (r Rule) rampProblems() []error {
	p := r.Ramp
	var errs []error
	if r.Scope != ScopeProvider && r.Scope != ScopeModel {
		errs = append(errs, errors.New("ramp: only provider and model rules ramp"))
	}
	w, window := r.Limit.(Window)
	if !window {
		errs = append(errs, errors.New("ramp: only request and token windows ramp"))
	}
	limit := w.MaxRequests
	if limit <= 0 {
		limit = w.MaxTokens
	}
	switch {
	case !window:
	case limit <= 0:
		errs = append(errs, errors.New("ramp: the rule needs max_requests or max_tokens, which the ramp grows to"))
	case p.Max < limit:
		// A ramped rule's limit is at or below its ramp's maximum (the
		// configured limit, see Ramped).
		errs = append(errs, fmt.Errorf("ramp.max: %d is below the rule's limit %d", p.Max, limit))
	}
	if p.Start < 1 || p.Start > p.Max {
		errs = append(errs, fmt.Errorf("ramp.start: %d is not from 1 to the rule's limit", p.Start))
	}
	if p.Step < 1 {
		errs = append(errs, fmt.Errorf("ramp.step: %d is not at least 1", p.Step))
	}
	if p.Every < time.Second {
		errs = append(errs, fmt.Errorf("ramp.every: %s is not at least 1s", p.Every))
	}
	return errs
}
