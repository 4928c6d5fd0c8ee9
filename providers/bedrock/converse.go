package bedrock

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/chat"
)

// The Converse API's JSON, as far as translation writes and reads it.

type converseRequest struct {
	Messages        []message        `json:"messages"`
	System          []systemBlock    `json:"system,omitempty"`
	InferenceConfig *inferenceConfig `json:"inferenceConfig,omitempty"`
	ToolConfig      *toolConfig      `json:"toolConfig,omitempty"`
	ServiceTier     *serviceTier     `json:"serviceTier,omitempty"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

// block is one content block: exactly one member is set.
type block struct {
	Text       string      `json:"text,omitempty"`
	Image      *image      `json:"image,omitempty"`
	ToolUse    *toolUse    `json:"toolUse,omitempty"`
	ToolResult *toolResult `json:"toolResult,omitempty"`
}

type systemBlock struct {
	Text string `json:"text"`
}

type image struct {
	Format string      `json:"format"`
	Source imageSource `json:"source"`
}

type imageSource struct {
	Bytes      string      `json:"bytes,omitempty"` // base64
	S3Location *s3Location `json:"s3Location,omitempty"`
}

type s3Location struct {
	URI string `json:"uri"`
}

type toolUse struct {
	ToolUseID string          `json:"toolUseId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

type toolResult struct {
	ToolUseID string              `json:"toolUseId"`
	Content   []toolResultContent `json:"content"`
}

type toolResultContent struct {
	Text string `json:"text"`
}

type inferenceConfig struct {
	MaxTokens     *int64   `json:"maxTokens,omitempty"`
	Temperature   *float64 `json:"temperature,omitempty"`
	TopP          *float64 `json:"topP,omitempty"`
	StopSequences []string `json:"stopSequences,omitempty"`
}

type toolConfig struct {
	Tools      []tool      `json:"tools"`
	ToolChoice *toolChoice `json:"toolChoice,omitempty"`
}

type tool struct {
	ToolSpec toolSpec `json:"toolSpec"`
}

type toolSpec struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	InputSchema inputSchema `json:"inputSchema"`
}

type inputSchema struct {
	JSON json.RawMessage `json:"json"`
}

type toolChoice struct {
	Auto *struct{}  `json:"auto,omitempty"`
	Any  *struct{}  `json:"any,omitempty"`
	Tool *namedTool `json:"tool,omitempty"`
}

type namedTool struct {
	Name string `json:"name"`
}

type serviceTier struct {
	Type string `json:"type"`
}

// converseResponse is a Converse answer.
type converseResponse struct {
	Output struct {
		Message struct {
			Content []struct {
				Text    *string  `json:"text"`
				ToolUse *toolUse `json:"toolUse"`
			} `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason string     `json:"stopReason"`
	Usage      tokenUsage `json:"usage"`
}

// tokenUsage is Converse's usage: inputTokens are the uncached input,
// cache reads and writes apart.
type tokenUsage struct {
	InputTokens           count `json:"inputTokens"`
	OutputTokens          count `json:"outputTokens"`
	CacheReadInputTokens  count `json:"cacheReadInputTokens"`
	CacheWriteInputTokens count `json:"cacheWriteInputTokens"`
}

// maxCount bounds a token count an answer reports: Bedrock's are 32-bit.
const maxCount = math.MaxInt32

// count is a token count as an upstream reports it, bounded to
// 0..maxCount: a negative, fractional or absurd number is input like any
// other, clamped rather than trusted (or refused with the whole answer).
type count int64

func (c *count) UnmarshalJSON(b []byte) error {
	// Past float64's range ParseFloat gives ±Inf: as large (or small) as
	// it gets. Not a number at all (null, a string) is none.
	f, err := strconv.ParseFloat(string(b), 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange), !(f > 0):
		*c = 0
	case f >= maxCount:
		*c = maxCount
	default:
		*c = count(f)
	}
	return nil
}

// usage converts: cache writes count as input, as Bedrock's quota counts
// them; cache reads are recorded apart.
func (u tokenUsage) usage() providers.Usage {
	return providers.Usage{
		InputTokens:           int64(u.InputTokens) + int64(u.CacheWriteInputTokens),
		OutputTokens:          int64(u.OutputTokens),
		CachedInputTokens:     int64(u.CacheReadInputTokens),
		CacheWriteInputTokens: int64(u.CacheWriteInputTokens),
		Reported:              true,
	}
}

// chatUsage writes the usage in OpenAI's shape: the prompt counts every
// input token, cached or not.
func (u tokenUsage) chatUsage() *chat.Usage {
	prompt := int64(u.InputTokens) + int64(u.CacheReadInputTokens) + int64(u.CacheWriteInputTokens)
	cu := &chat.Usage{PromptTokens: prompt, CompletionTokens: int64(u.OutputTokens), TotalTokens: prompt + int64(u.OutputTokens)}
	if u.CacheReadInputTokens > 0 {
		cu.PromptTokensDetails = &chat.PromptDetails{CachedTokens: int64(u.CacheReadInputTokens)}
	}
	return cu
}

// toConverse translates a chat completion request.
func toConverse(c *chat.Request, tier string) (*converseRequest, error) {
	out := &converseRequest{}
	ic := inferenceConfig{Temperature: c.Temperature, TopP: c.TopP, StopSequences: c.Stop}
	if m := c.MaxOutput(); m > 0 {
		ic.MaxTokens = &m
	}
	if ic.MaxTokens != nil || ic.Temperature != nil || ic.TopP != nil || len(ic.StopSequences) > 0 {
		out.InferenceConfig = &ic
	}
	if tier != "" {
		out.ServiceTier = &serviceTier{Type: tier}
	}
	add := func(role string, b ...block) {
		if len(b) == 0 {
			return
		}
		// Converse alternates roles: consecutive turns of one role merge
		// (tool results after the assistant's calls are one user turn).
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
			out.Messages[n-1].Content = append(out.Messages[n-1].Content, b...)
			return
		}
		out.Messages = append(out.Messages, message{Role: role, Content: b})
	}
	for i, cm := range c.Messages {
		switch cm.Role {
		case "system", "developer":
			if t := cm.Content.String(); t != "" {
				out.System = append(out.System, systemBlock{Text: t})
			}
		case "user":
			blocks, err := userBlocks(cm.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			add("user", blocks...)
		case "assistant":
			var blocks []block
			if t := cm.Content.String(); t != "" {
				blocks = append(blocks, block{Text: t})
			}
			for _, tc := range cm.ToolCalls {
				input := json.RawMessage(tc.Function.Arguments)
				if len(input) == 0 || !json.Valid(input) {
					input = json.RawMessage(`{}`)
				}
				blocks = append(blocks, block{ToolUse: &toolUse{ToolUseID: tc.ID, Name: tc.Function.Name, Input: input}})
			}
			add("assistant", blocks...)
		case "tool":
			add("user", block{ToolResult: &toolResult{ToolUseID: cm.ToolCallID,
				Content: []toolResultContent{{Text: cm.Content.String()}}}})
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, cm.Role)
		}
	}
	if len(c.Tools) > 0 {
		tc := &toolConfig{}
		for _, t := range c.Tools {
			schema := t.Function.Parameters
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			tc.Tools = append(tc.Tools, tool{ToolSpec: toolSpec{Name: t.Function.Name, Description: t.Function.Description,
				InputSchema: inputSchema{JSON: schema}}})
		}
		tc.ToolChoice = toolChoiceOf(c.ToolChoice)
		out.ToolConfig = tc
	}
	return out, nil
}

// toolChoiceOf translates tool_choice: "auto", "required" (any), a named
// function; "none" has no Converse equivalent and is left to the model.
func toolChoiceOf(raw json.RawMessage) *toolChoice {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto":
			return &toolChoice{Auto: &struct{}{}}
		case "required":
			return &toolChoice{Any: &struct{}{}}
		}
		return nil
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) == nil && named.Function.Name != "" {
		return &toolChoice{Tool: &namedTool{Name: named.Function.Name}}
	}
	return nil
}

// imageFormats are the image types Converse takes, by media type.
var imageFormats = map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif", "image/webp": "webp"}

// userBlocks translates a user message's content: text, and images as
// data URLs (Converse takes image bytes, or an s3:// location).
func userBlocks(c chat.Content) ([]block, error) {
	if !c.IsParts {
		if c.Text == "" {
			return nil, nil
		}
		return []block{{Text: c.Text}}, nil
	}
	var out []block
	for _, part := range c.Parts {
		switch part.Type {
		case "text":
			if part.Text != "" {
				out = append(out, block{Text: part.Text})
			}
		case "image_url":
			if part.ImageURL == nil {
				return nil, fmt.Errorf("image_url part without a url")
			}
			img, err := imageOf(part.ImageURL.URL)
			if err != nil {
				return nil, err
			}
			out = append(out, block{Image: img})
		default:
			return nil, fmt.Errorf("content part type %q cannot be sent to Bedrock", part.Type)
		}
	}
	return out, nil
}

func imageOf(u string) (*image, error) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		media, data, ok := strings.Cut(rest, ";base64,")
		if !ok {
			return nil, fmt.Errorf("image data URL is not base64")
		}
		f, ok := imageFormats[strings.ToLower(media)]
		if !ok {
			return nil, fmt.Errorf("image type %q: Bedrock takes png, jpeg, gif and webp", media)
		}
		return &image{Format: f, Source: imageSource{Bytes: data}}, nil
	}
	if strings.HasPrefix(u, "s3://") {
		f := "png"
		if i := strings.LastIndexByte(u, '.'); i >= 0 {
			if v, ok := imageFormats["image/"+strings.ToLower(u[i+1:])]; ok {
				f = v
			}
		}
		return &image{Format: f, Source: imageSource{S3Location: &s3Location{URI: u}}}, nil
	}
	return nil, fmt.Errorf("image URLs are not fetched for Bedrock: send the image as a data URL (or an s3:// location)")
}

var finishReasons = map[string]string{
	"end_turn":                      "stop",
	"stop_sequence":                 "stop",
	"max_tokens":                    "length",
	"model_context_window_exceeded": "length",
	"tool_use":                      "tool_calls",
	"guardrail_intervened":          "content_filter",
	"content_filtered":              "content_filter",
}

func finishReason(stop string) string {
	if r, ok := finishReasons[stop]; ok {
		return r
	}
	return "stop"
}
