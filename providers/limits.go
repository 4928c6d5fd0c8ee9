package providers

import (
	"slices"
	"strings"
)

// MaxRequestTokens bounds any token count a client may ask for
// (max_tokens and its equivalents): every provider takes a 32-bit integer
// there. A larger value is refused with 400 before admission.
const MaxRequestTokens = 1<<31 - 1

// MaxChoices bounds n, the number of completions one chat request asks
// for (OpenAI accepts 1 to 128).
const MaxChoices = 128

// MaxCandidates bounds Gemini's candidateCount.
const MaxCandidates = 8

// MaxKeptModelID is the longest model id the gateway keeps state under
// (a target's price and limits, its answer times): a client may name any
// id of any provider, as "provider/id", and no real one is near it.
const MaxKeptModelID = 256

// MaxOutputTokens returns the largest output of a model when it is known
// (the capabilities table): "gpt-4o-2024-08-06" and "openai/gpt-4o" are
// gpt-4o, Bedrock's "us.anthropic.claude-sonnet-4-20250514-v1:0" is
// claude-sonnet-4. A reservation is never larger: a provider refuses a
// larger max_tokens or stops there.
func MaxOutputTokens(model string) (int64, bool) {
	c, ok := BuiltinCapabilities(model)
	return c.MaxOutputTokens, ok && c.MaxOutputTokens > 0
}

// BaseModelID returns a model id as its maker names it, lower-cased:
// without a "provider/" (or ARN) prefix, nor Bedrock's geography of an
// inference profile and vendor ("us.anthropic.", "global.",
// "amazon."): "us.anthropic.claude-sonnet-4-5-20250929-v1:0" is
// "claude-sonnet-4-5-20250929-v1:0".
func BaseModelID(model string) string {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	if geo, rest, ok := strings.Cut(m, "."); ok && slices.Contains(bedrockGeographies, geo) {
		m = rest
	}
	if vendor, rest, ok := strings.Cut(m, "."); ok && slices.Contains(bedrockVendors, vendor) {
		m = rest
	}
	return m
}

// bedrockGeographies are the prefixes of Bedrock's cross-region inference
// profiles; bedrockVendors the model providers Bedrock prefixes ids with.
var (
	bedrockGeographies = []string{"us", "eu", "apac", "jp", "au", "ca", "us-gov", "global"}
	bedrockVendors     = []string{"anthropic", "amazon", "meta", "mistral", "cohere", "ai21", "deepseek", "openai", "qwen", "writer", "twelvelabs", "stability", "luma", "google", "nvidia", "minimax", "moonshot"}
)
