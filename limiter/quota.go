package limiter

import (
	"errors"
	"fmt"
)

// QuotaArithmetic says how a rule's token window counts a request: as
// tollgate does for every provider (input + output), or as an upstream's
// own quota does, so that a rule set to that quota refuses where the
// upstream would throttle.
type QuotaArithmetic uint8

const (
	// QuotaStandard charges input + max output at admission and settles
	// to input + output (cache reads count where the provider counts them,
	// see Usage).
	QuotaStandard QuotaArithmetic = iota
	// QuotaBedrock is Amazon Bedrock's tokens-per-minute arithmetic: a
	// request is charged input (with cache writes and reads) + max output
	// × the model's output burndown at admission, and settled to input
	// (with cache writes, without cache reads) + output × burndown. Only
	// the rule's max_tokens window counts so; its request, input and
	// output windows keep the standard arithmetic.
	QuotaBedrock
)

// MaxBurndown bounds an output burndown factor: Bedrock's largest is 5.
const MaxBurndown = 100

// String returns the quota's name in config and the admin API.
func (q QuotaArithmetic) String() string {
	if q == QuotaBedrock {
		return "bedrock"
	}
	return "standard"
}

// ParseQuota is the inverse of Quota.String; "" is standard.
func ParseQuota(s string) (QuotaArithmetic, error) {
	switch s {
	case "", "standard":
		return QuotaStandard, nil
	case "bedrock":
		return QuotaBedrock, nil
	}
	return 0, fmt.Errorf("unknown quota %q (want standard or bedrock)", s)
}

// quotaProblems lists what is wrong with a window's quota on a rule of
// scope: Bedrock's arithmetic is for the token windows of provider and
// model rules.
func (w Window) quotaProblems(scope Scope) []error {
	switch {
	case w.Quota == QuotaStandard:
		return nil
	case w.Quota > QuotaBedrock:
		return []error{fmt.Errorf("quota: unknown quota %d", w.Quota)}
	}
	var errs []error
	if scope != ScopeProvider && scope != ScopeModel {
		errs = append(errs, fmt.Errorf("quota: bedrock counts an upstream's quota: only provider and model rules take it, not %s rules", scope))
	}
	if w.MaxTokens == 0 {
		errs = append(errs, errors.New("quota: bedrock changes how max_tokens counts; set max_tokens"))
	}
	return errs
}

// bedrockTokens is a request's charge on a QuotaBedrock window: input +
// output × burndown, bounded to MaxAmount. At admission input is the
// prompt estimate (which cache writes and reads are part of) and output
// the reservation; at settlement input is without cache reads (see
// Usage.uncachedInput) and output what was produced.
func bedrockTokens(input, output, burndown int64) int64 {
	return min(SatAdd(input, SatMul(output, max(burndown, 1))), MaxAmount)
}

// uncachedInput is the input a Bedrock quota settles to: cache writes
// count, cache reads are given back.
func (u Usage) uncachedInput() int64 {
	if u.CachedInInput {
		return max(u.InputTokens-u.CachedInputTokens, 0)
	}
	return u.InputTokens
}
