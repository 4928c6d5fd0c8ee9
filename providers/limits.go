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

// maxOutput lists the largest output, in tokens, of well-known model
// families, by model-id prefix (longest prefix wins), as their providers
// document them (2026-11). A reservation is never larger: a provider
// refuses a larger max_tokens or stops there.
var maxOutput = []struct {
	prefix string
	tokens int64
}{
	{"gpt-4o-mini", 16_384},
	{"gpt-4o", 16_384},
	{"chatgpt-4o", 16_384},
	{"gpt-4.1", 32_768},
	{"gpt-4.5", 16_384},
	{"gpt-4-turbo", 4_096},
	{"gpt-4", 8_192},
	{"gpt-3.5", 4_096},
	{"gpt-5", 128_000},
	{"gpt-oss", 131_072},
	{"o1-mini", 65_536},
	{"o1", 100_000},
	{"o3", 100_000},
	{"o4", 100_000},
	{"claude-3-5-haiku", 8_192},
	{"claude-3-5-sonnet", 8_192},
	{"claude-3-7-sonnet", 64_000},
	{"claude-3-haiku", 4_096},
	{"claude-3-opus", 4_096},
	{"claude-sonnet-4", 64_000},
	{"claude-opus-4", 32_000},
	{"claude-haiku-4", 64_000},
	{"gemini-1.5", 8_192},
	{"gemini-2.0", 8_192},
	{"gemini-2.5", 65_536},
	{"gemini-3", 65_536},
}

// MaxOutputTokens returns the largest output of a model when it is known:
// "gpt-4o-2024-08-06" and "openai/gpt-4o" are gpt-4o, Bedrock's
// "us.anthropic.claude-sonnet-4-20250514-v1:0" is claude-sonnet-4.
func MaxOutputTokens(model string) (int64, bool) {
	m := BaseModelID(model)
	best, n := -1, int64(0)
	for i, e := range maxOutput {
		if strings.HasPrefix(m, e.prefix) && (best < 0 || len(e.prefix) > len(maxOutput[best].prefix)) {
			best, n = i, e.tokens
		}
	}
	return n, best >= 0
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
