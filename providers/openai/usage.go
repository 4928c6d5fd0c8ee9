package openai

import (
	"bytes"
	"encoding/json"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/sse"
)

// usage is OpenAI's usage block, in both of its shapes: chat completions
// and embeddings (prompt/completion tokens), and the Responses API
// (input/output tokens).
type usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// toUsage converts; OpenAI counts cached prompt tokens towards its limits,
// so they stay in InputTokens and are also reported apart.
func (u *usage) toUsage() providers.Usage {
	return providers.Usage{
		InputTokens:       u.PromptTokens + u.InputTokens,
		OutputTokens:      u.CompletionTokens + u.OutputTokens,
		CachedInputTokens: u.PromptTokensDetails.CachedTokens + u.InputTokensDetails.CachedTokens,
		Reported:          true,
	}
}

// chatUsage reads the usage block of a chat completion, an embedding
// answer or a stream chunk.
func chatUsage(body []byte) (providers.Usage, bool) {
	if !bytes.Contains(body, []byte(`"usage"`)) {
		return providers.Usage{}, false
	}
	var b struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(body, &b) != nil || b.Usage == nil {
		return providers.Usage{}, false
	}
	return b.Usage.toUsage(), true
}

// responsesUsage reads the usage of a Responses API answer.
func responsesUsage(body []byte) (providers.Usage, bool) {
	return chatUsage(body)
}

// chatStream sees one chunk of a chat completion stream: the usage chunk
// (no choices) sets the usage, and is passed on only if the client asked
// for it; content chunks count output as it goes, so a broken stream still
// reports what it delivered.
func chatStream(ev sse.Event, res *providers.Result, clientWantsUsage bool) bool {
	if bytes.Equal(ev.Data, []byte("[DONE]")) {
		return true
	}
	var c struct {
		Choices []struct {
			Delta struct {
				Content   string            `json:"content"`
				ToolCalls []json.RawMessage `json:"tool_calls"`
				Refusal   string            `json:"refusal"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(ev.Data, &c) != nil {
		return true
	}
	if c.Usage != nil {
		res.Usage = c.Usage.toUsage()
		if len(c.Choices) == 0 {
			return clientWantsUsage
		}
		return true
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" || len(ch.Delta.ToolCalls) > 0 || ch.Delta.Refusal != "" {
			if !res.Usage.Reported {
				res.Usage.OutputTokens++ // about one token a chunk, until the real count arrives
			}
		}
	}
	return true
}

// responsesStream sees one event of a Responses API stream: the usage is in
// response.completed (or .incomplete / .failed).
func responsesStream(ev sse.Event, res *providers.Result) bool {
	switch ev.Name {
	case "response.completed", "response.incomplete", "response.failed":
		var e struct {
			Response struct {
				Usage *usage `json:"usage"`
			} `json:"response"`
		}
		if json.Unmarshal(ev.Data, &e) == nil && e.Response.Usage != nil {
			res.Usage = e.Response.Usage.toUsage()
		}
	case "response.output_text.delta":
		if !res.Usage.Reported {
			res.Usage.OutputTokens++
		}
	}
	return true
}
