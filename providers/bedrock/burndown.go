package bedrock

import (
	"strings"

	"github.com/tollgate/tollgate/providers"
)

// maxBurndown bounds a configured burndown, as the limiter does.
const maxBurndown = 100

// Bedrock's output burndown, as its quota documentation gives it
// (2026-11): each output token of Anthropic Claude 3.7 Sonnet and of every
// later Claude model counts as 5 against the tokens-per-minute quota;
// every other model's counts as 1. Claude models older than 3.7 are
// listed; a Claude model not listed is taken to be a later one, so that a
// new model is never under-reserved.
var olderClaude = []string{
	"claude-instant", "claude-v2", "claude-2", "claude-3-haiku", "claude-3-sonnet", "claude-3-opus",
	"claude-3-5-sonnet", "claude-3-5-haiku",
}

// Burndown returns the output burndown of a Bedrock model id or inference
// profile id: the longest prefix of overrides that the model id starts
// with (both read without Bedrock's geography prefix, as BaseModelID does,
// case ignored), else the built-in table.
func Burndown(model string, overrides map[string]int64) int64 {
	base := providers.BaseModelID(model)
	best, factor := -1, int64(0)
	for k, v := range overrides {
		if p := providers.BaseModelID(k); strings.HasPrefix(base, p) && len(p) > best {
			best, factor = len(p), v
		}
	}
	if best >= 0 {
		return factor
	}
	if !strings.HasPrefix(base, "claude") {
		return 1
	}
	for _, p := range olderClaude {
		if strings.HasPrefix(base, p) {
			return 1
		}
	}
	return 5
}
