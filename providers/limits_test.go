package providers

import (
	"net/http"
	"testing"
	"time"
)

// Bedrock's ids name the same models: a geography and a vendor before
// the maker's id, or an ARN around it.
func TestMaxOutputTokensOfBedrockIDs(t *testing.T) {
	for model, want := range map[string]int64{
		"gpt-4o-2024-08-06":                                                               16_384,
		"openai/gpt-4.1":                                                                  32_768,
		"anthropic.claude-3-7-sonnet-20250219-v1:0":                                       64_000,
		"us.anthropic.claude-sonnet-4-20250514-v1:0":                                      64_000,
		"global.anthropic.claude-opus-4-1-20250805-v1:0":                                  32_000,
		"bedrock/eu.anthropic.claude-3-haiku-20240307-v1:0":                               4_096,
		"arn:aws:bedrock:us-east-1:1:inference-profile/apac.anthropic.claude-haiku-4-5-1": 64_000,
	} {
		if got, ok := MaxOutputTokens(model); !ok || got != want {
			t.Errorf("MaxOutputTokens(%s) = %d, %v; want %d", model, got, ok, want)
		}
	}
	for id, want := range map[string]string{
		"us.anthropic.claude-sonnet-4-5-20250929-v1:0": "claude-sonnet-4-5-20250929-v1:0",
		"amazon.titan-embed-text-v2:0":                 "titan-embed-text-v2:0",
		"gpt-4.1-mini":                                 "gpt-4.1-mini",
		"meta-llama/Llama-3.1-8B":                      "llama-3.1-8b",
	} {
		if got := BaseModelID(id); got != want {
			t.Errorf("BaseModelID(%s) = %s, want %s", id, got, want)
		}
	}
}

// An answer's rate-limit headers, OpenAI's and Anthropic's, and its
// Retry-After in each of its forms, are read from one pass over its
// headers; the OpenAI name first when both are there, the next one when
// the first is not a number, -1 for a count the answer does not give.
func TestParseLimits(t *testing.T) {
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		h    http.Header
		want UpstreamLimits
	}{
		{"none", http.Header{"Content-Type": {"application/json"}, "Date": {"x"}},
			UpstreamLimits{LimitRequests: -1, LimitTokens: -1, RemainingRequests: -1, RemainingTokens: -1}},
		{"openai", http.Header{
			"X-Ratelimit-Limit-Requests": {"500"}, "X-Ratelimit-Limit-Tokens": {"30000"},
			"X-Ratelimit-Remaining-Requests": {"499"}, "X-Ratelimit-Remaining-Tokens": {"29000"},
			"X-Ratelimit-Reset-Requests": {"120ms"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}, "Retry-After-Ms": {"250"}},
			UpstreamLimits{LimitRequests: 500, LimitTokens: 30000, RemainingRequests: 499, RemainingTokens: 29000,
				ResetRequests: 120 * time.Millisecond, ResetTokens: 6 * time.Minute, RetryAfter: 250 * time.Millisecond}},
		{"anthropic", http.Header{
			"Anthropic-Ratelimit-Requests-Limit": {"50"}, "Anthropic-Ratelimit-Tokens-Limit": {"40000"},
			"Anthropic-Ratelimit-Requests-Remaining": {"0"}, "Anthropic-Ratelimit-Tokens-Remaining": {"100"},
			"Anthropic-Ratelimit-Requests-Reset": {"2026-12-02T09:00:30Z"}, "Anthropic-Ratelimit-Tokens-Reset": {"1.5"},
			"Retry-After": {"Wed, 02 Dec 2026 09:00:10 GMT"}},
			UpstreamLimits{LimitRequests: 50, LimitTokens: 40000, RemainingRequests: 0, RemainingTokens: 100,
				ResetRequests: 30 * time.Second, ResetTokens: 1500 * time.Millisecond, RetryAfter: 10 * time.Second}},
		{"precedence", http.Header{
			"X-Ratelimit-Limit-Requests": {"many"}, "Anthropic-Ratelimit-Requests-Limit": {"7"},
			"X-Ratelimit-Limit-Tokens": {"9"}, "Anthropic-Ratelimit-Tokens-Limit": {"8"},
			"Retry-After": {"3"}, "Retry-After-Ms": {"1500"}},
			UpstreamLimits{LimitRequests: 7, LimitTokens: 9, RemainingRequests: -1, RemainingTokens: -1, RetryAfter: 1500 * time.Millisecond}},
		{"retry-after in seconds", http.Header{"Retry-After": {"3"}},
			UpstreamLimits{LimitRequests: -1, LimitTokens: -1, RemainingRequests: -1, RemainingTokens: -1, RetryAfter: 3 * time.Second}},
	} {
		if got := ParseLimits(c.h, now); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
