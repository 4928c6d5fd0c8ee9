package admission

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// order returns the targets in the order to try them: as configured for
// failover, drawn by weight for a weighted alias.
func (o *Orchestrator) order(rt providers.Route) []providers.Target {
	if rt.Strategy != providers.Weighted || len(rt.Targets) < 2 {
		return rt.Targets
	}
	rest := slices.Clone(rt.Targets)
	out := make([]providers.Target, 0, len(rest))
	for len(rest) > 0 {
		total := 0
		for _, t := range rest {
			total += t.Weight
		}
		x := o.cfg.Rand() * float64(total)
		i := 0
		for acc := float64(rest[0].Weight); i < len(rest)-1 && x >= acc; acc += float64(rest[i].Weight) {
			i++
		}
		out = append(out, rest[i])
		rest = slices.Delete(rest, i, i+1)
	}
	return out
}

// reservation is the output a request reserves at a target model: its
// cap (or the default, or what the model's requests were learned to use),
// never more than the model can produce (or the configured maximum),
// times the completions it asks for.
func (a *Admission) reservation(ctx context.Context, model string, f facts) int64 {
	if a.req.Session {
		return min(a.reserveOut, limiter.MaxAmount) // a whole session's, not one answer's
	}
	cfg := &a.o.cfg
	out := min(a.reserveOut, cfg.MaxOutputTokens)
	if out > 0 && cfg.Estimates != nil && (a.req.MaxTokens <= 0 || cfg.AdaptiveCapped) {
		if est, ok := a.o.estimate(ctx, a.req.Op.String(), model, a.req.Caller.KeyID); ok {
			out = max(est.P95, cfg.AdaptiveFloor)
			if a.req.MaxTokens > 0 {
				out = min(out, a.req.MaxTokens)
			}
			out = min(out, cfg.MaxOutputTokens)
		}
	}
	if f.hasMaxOut {
		out = min(out, f.maxOut)
	}
	return min(limiter.SatMul(out, max(a.req.Choices, 1)), limiter.MaxAmount)
}

// estimate is the learned output estimate of a route, model and key,
// within the store deadline.
func (o *Orchestrator) estimate(ctx context.Context, route, model, key string) (Estimate, bool) {
	var est Estimate
	var ok bool
	_ = o.StoreCall(ctx, func(ctx context.Context) error {
		est, ok = o.cfg.Estimates.OutputEstimate(ctx, route, model, key)
		return ctx.Err()
	})
	return est, ok
}

// burndownOf is how many quota tokens an output token of target t counts
// for, for rules of Bedrock's quota: the provider's burndown, else 1.
func burndownOf(t providers.Target) int64 {
	if b, ok := t.Provider.(providers.Burndowner); ok {
		return min(max(b.OutputBurndown(t.Model), 1), limiter.MaxBurndown)
	}
	return 1
}

// leaseID names the lease of one pass's attempt at one target: the
// request id made compact (its first 12 bytes, base64url), so that a
// slot, which holds its lease's id, costs as little as it can.
func leaseID(reqID string, pass, target int) string {
	// Written into one array: the lease id is the one string made.
	var buf [64]byte
	b := buf[:0]
	if len(reqID) >= 24 && isHex(reqID) {
		var raw [12]byte
		_, _ = hex.Decode(raw[:], []byte(reqID[:24]))
		b = base64.RawURLEncoding.AppendEncode(b, raw[:])
	} else {
		b = append(b, reqID[:min(len(reqID), 40)]...)
	}
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(pass), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(target), 10)
	return string(b)
}

// isHex reports whether s is hex.DecodeString's to decode: pairs of hex
// digits.
func isHex(s string) bool {
	if len(s)%2 != 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// consumerScope reports whether a rule of scope s limits the caller, so
// that no other target can help a request it refuses.
func consumerScope(s limiter.Scope) bool {
	return s == limiter.ScopeUserPath || s == limiter.ScopeTag || s == limiter.ScopeKey
}
