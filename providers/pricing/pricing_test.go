package pricing_test

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers/pricing"
)

func TestLookup(t *testing.T) {
	custom := limiter.Price{Input: 1, Output: 2, CachedInput: 1}
	eu := limiter.Price{Input: 3, Output: 4, CachedInput: 3}
	tbl := pricing.New(map[string]limiter.Price{"my-model": custom, "openai-eu/gpt-4o": eu, "huge": {Input: 900_000_000, Output: 1, CachedInput: 1}}, nil)
	for _, tc := range []struct {
		provider, model string
		want            limiter.Price
		src             pricing.Source
	}{
		{"openai", "gpt-4o", limiter.Price{Input: 2_500_000, Output: 10_000_000, CachedInput: 1_250_000}, pricing.FromBuiltin},
		{"openai", "gpt-4o-2024-08-06", limiter.Price{Input: 2_500_000, Output: 10_000_000, CachedInput: 1_250_000}, pricing.FromBuiltin},
		{"openai", "GPT-4o-Mini-2024-07-18", limiter.Price{Input: 150_000, Output: 600_000, CachedInput: 75_000}, pricing.FromBuiltin},
		{"openai-eu", "gpt-4o", eu, pricing.FromConfig},
		{"vllm", "my-model", custom, pricing.FromConfig},
		{"router", "anthropic/claude-sonnet-4-5", limiter.Price{Input: 3_000_000, Output: 15_000_000, CachedInput: 300_000}, pricing.FromBuiltin},
		{"vllm", "llama-3-70b", limiter.Price{Input: 900_000_000, Output: 75_000_000, CachedInput: 30_000_000}, pricing.FromHighest},
	} {
		got, src := tbl.Lookup(tc.provider, tc.model)
		if got != tc.want || src != tc.src {
			t.Errorf("Lookup(%s, %s) = %+v (%s), want %+v (%s)", tc.provider, tc.model, got, src, tc.want, tc.src)
		}
	}
	def := limiter.Price{Input: 7, Output: 8, CachedInput: 7}
	if got, src := pricing.New(nil, &def).Lookup("vllm", "llama"); got != def || src != pricing.FromDefault {
		t.Fatalf("default: %+v %s", got, src)
	}
	if got := pricing.Batch(limiter.Price{Input: 5, Output: 4, CachedInput: 1}); got != (limiter.Price{Input: 3, Output: 2, CachedInput: 1}) {
		t.Fatalf("batch %+v", got)
	}
}
