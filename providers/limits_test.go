package providers

import "testing"

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
