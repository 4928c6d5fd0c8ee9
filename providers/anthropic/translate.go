package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/chat"
	"github.com/tollgate/tollgate/providers/sse"
)

// The Messages request, as far as translation writes it.
type msgRequest struct {
	Model         string       `json:"model"`
	MaxTokens     int64        `json:"max_tokens"`
	System        string       `json:"system,omitempty"`
	Messages      []msg        `json:"messages"`
	Stream        bool         `json:"stream,omitempty"`
	Temperature   *float64     `json:"temperature,omitempty"`
	TopP          *float64     `json:"top_p,omitempty"`
	StopSequences []string     `json:"stop_sequences,omitempty"`
	Tools         []msgTool    `json:"tools,omitempty"`
	ToolChoice    *toolChoice  `json:"tool_choice,omitempty"`
	Metadata      *msgMetadata `json:"metadata,omitempty"`
}

type msg struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Source    *imageSource    `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
}

type imageSource struct {
	Type      string `json:"type"` // base64 or url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type msgTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type toolChoice struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

type msgMetadata struct {
	UserID string `json:"user_id,omitempty"`
}

// The Messages answer.
type msgResponse struct {
	ID         string    `json:"id"`
	Model      string    `json:"model"`
	Content    []block   `json:"content"`
	StopReason string    `json:"stop_reason"`
	Usage      wireUsage `json:"usage"`
}

// toMessages translates a chat completion request.
func (p *Provider) toMessages(c *chat.Request, model string) (*msgRequest, error) {
	m := &msgRequest{
		Model:         model,
		MaxTokens:     c.MaxOutput(),
		Stream:        c.Stream,
		Temperature:   c.Temperature,
		TopP:          c.TopP,
		StopSequences: c.Stop,
	}
	if m.MaxTokens <= 0 {
		m.MaxTokens = p.cfg.DefaultMaxTokens
	}
	if c.User != "" {
		m.Metadata = &msgMetadata{UserID: c.User}
	}
	var system []string
	add := func(role string, b ...block) {
		if len(b) == 0 {
			return
		}
		// Messages alternate roles: consecutive turns of one role merge.
		if n := len(m.Messages); n > 0 && m.Messages[n-1].Role == role {
			m.Messages[n-1].Content = append(m.Messages[n-1].Content, b...)
			return
		}
		m.Messages = append(m.Messages, msg{Role: role, Content: b})
	}
	for i, cm := range c.Messages {
		switch cm.Role {
		case "system", "developer":
			system = append(system, cm.Content.String())
		case "user":
			blocks, err := contentBlocks(cm.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			add("user", blocks...)
		case "assistant":
			var blocks []block
			if t := cm.Content.String(); t != "" {
				blocks = append(blocks, block{Type: "text", Text: t})
			}
			for _, tc := range cm.ToolCalls {
				input := json.RawMessage(tc.Function.Arguments)
				if !json.Valid(input) || len(input) == 0 {
					input = json.RawMessage(`{}`)
				}
				blocks = append(blocks, block{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: input})
			}
			add("assistant", blocks...)
		case "tool":
			add("user", block{Type: "tool_result", ToolUseID: cm.ToolCallID, Content: cm.Content.String()})
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, cm.Role)
		}
	}
	m.System = strings.Join(system, "\n\n")
	m.Tools, m.ToolChoice = toolsOf(c)
	return m, nil
}

// toolsOf translates a request's tools and tool_choice (none given is
// nil: the upstream's default).
func toolsOf(c *chat.Request) (tools []msgTool, choice *toolChoice) {
	for _, t := range c.Tools {
		schema := t.Function.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		tools = append(tools, msgTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
	}
	if len(c.ToolChoice) == 0 {
		return tools, nil
	}
	var s string
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	switch {
	case json.Unmarshal(c.ToolChoice, &s) == nil:
		switch s {
		case "auto":
			choice = &toolChoice{Type: "auto"}
		case "required":
			choice = &toolChoice{Type: "any"}
		case "none":
			choice = &toolChoice{Type: "none"}
		}
	case json.Unmarshal(c.ToolChoice, &named) == nil && named.Function.Name != "":
		choice = &toolChoice{Type: "tool", Name: named.Function.Name}
	}
	return tools, choice
}

// contentBlocks translates a user message's content.
func contentBlocks(c chat.Content) ([]block, error) {
	if !c.IsParts {
		return []block{{Type: "text", Text: c.Text}}, nil
	}
	var out []block
	for _, part := range c.Parts {
		switch part.Type {
		case "text":
			out = append(out, block{Type: "text", Text: part.Text})
		case "image_url":
			if part.ImageURL == nil {
				return nil, fmt.Errorf("image_url part without a url")
			}
			u := part.ImageURL.URL
			if rest, ok := strings.CutPrefix(u, "data:"); ok {
				media, data, ok := strings.Cut(rest, ";base64,")
				if !ok {
					return nil, fmt.Errorf("image data URL is not base64")
				}
				out = append(out, block{Type: "image", Source: &imageSource{Type: "base64", MediaType: media, Data: data}})
			} else {
				out = append(out, block{Type: "image", Source: &imageSource{Type: "url", URL: u}})
			}
		default:
			return nil, fmt.Errorf("content part type %q cannot be sent to Anthropic", part.Type)
		}
	}
	return out, nil
}

var finishReasons = map[string]string{
	"end_turn":      "stop",
	"stop_sequence": "stop",
	"max_tokens":    "length",
	"tool_use":      "tool_calls",
	"refusal":       "content_filter",
	"pause_turn":    "stop",
}

func finishReason(stop string) string {
	if r, ok := finishReasons[stop]; ok {
		return r
	}
	return "stop"
}

// chatUsage writes Anthropic's usage in OpenAI's shape: the prompt counts
// every input token, cached or not, as OpenAI's does.
func chatUsage(u wireUsage) *chat.Usage {
	prompt := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	cu := &chat.Usage{PromptTokens: prompt, CompletionTokens: u.OutputTokens, TotalTokens: prompt + u.OutputTokens}
	if u.CacheReadInputTokens > 0 {
		cu.PromptTokensDetails = &chat.PromptDetails{CachedTokens: u.CacheReadInputTokens}
	}
	return cu
}

// chat serves an OpenAI chat completion from the Messages API.
func (p *Provider) chat(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	var c chat.Request
	if err := json.Unmarshal(r.Body, &c); err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: err}
	}
	m, err := p.toMessages(&c, r.Model)
	if err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: fmt.Errorf("%w: %w", providers.ErrUnsupported, err)}
	}
	body, _ := json.Marshal(m)
	resp, perr := p.request(ctx, http.MethodPost, p.cfg.BaseURL+"/v1/messages", body, &providers.Request{Header: http.Header{}})
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	res := providers.Result{Status: http.StatusOK, Limits: providers.ParseLimits(resp.Header, time.Now())}
	providers.CopyHeaders(w, resp)
	if c.Stream {
		return p.streamChat(w, resp, res, &c)
	}
	b, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err != nil {
		return res, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	var mr msgResponse
	if err := json.Unmarshal(b, &mr); err != nil {
		return res, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway, Err: fmt.Errorf("undecodable Messages answer: %w", err)}
	}
	out := chat.Response{
		ID:      "chatcmpl-" + mr.ID,
		Object:  "chat.completion",
		Created: p.cfg.Now().Unix(),
		Model:   mr.Model,
		Usage:   chatUsage(mr.Usage),
	}
	msgOut := chat.ResponseMessage{Role: "assistant"}
	var text strings.Builder
	for _, b := range mr.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			msgOut.ToolCalls = append(msgOut.ToolCalls, chat.ToolCall{
				ID: b.ID, Type: "function", Function: chat.FunctionCall{Name: b.Name, Arguments: string(b.Input)},
			})
		}
	}
	if text.Len() > 0 || len(msgOut.ToolCalls) == 0 {
		s := text.String()
		msgOut.Content = &s
	}
	out.Choices = []chat.Choice{{Index: 0, Message: msgOut, FinishReason: finishReason(mr.StopReason)}}
	res.Usage = mr.Usage.toUsage()
	enc, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(enc)
	return res, nil
}

// streamChat translates a Messages stream into chat completion chunks as
// the events arrive.
func (p *Provider) streamChat(w http.ResponseWriter, resp *http.Response, res providers.Result, c *chat.Request) (providers.Result, error) {
	sse.Header(w, http.StatusOK)
	rd := sse.NewReader(resp.Body)
	defer rd.Close()
	s := chatStream{sw: sse.NewWriter(w), c: c, id: "chatcmpl-anthropic", model: c.Model, created: p.cfg.Now().Unix(), tool: -1}
	for {
		ev, err := rd.Next()
		if err != nil {
			res.Usage = s.acc.usage()
			return res, nil
		}
		s.acc.see(ev)
		if err := s.event(ev); err != nil {
			s.acc.done = false
			res.Usage = s.acc.usage()
			return res, nil
		}
	}
}

// chatStream translates one Messages stream into chat completion chunks
// as its events arrive, counting its usage.
type chatStream struct {
	sw        *sse.Writer
	c         *chat.Request
	id, model string
	created   int64
	tool      int // the index of the tool call streaming, -1 before the first
	acc       usageAcc
}

// send writes one chunk: a delta, or the usage alone.
func (s *chatStream) send(delta chat.Delta, finish *string, usage *chat.Usage) error {
	ch := chat.Chunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model, Usage: usage}
	if usage == nil {
		ch.Choices = []chat.ChunkChoice{{Index: 0, Delta: delta, FinishReason: finish}}
	} else {
		ch.Choices = []chat.ChunkChoice{}
	}
	b, _ := json.Marshal(ch)
	return s.sw.Event("", b)
}

// event translates one event; an error is the client's write failing.
func (s *chatStream) event(ev sse.Event) error {
	var werr error
	switch ev.Name {
	case "message_start":
		var e struct {
			Message struct {
				ID    string `json:"id"`
				Model string `json:"model"`
			} `json:"message"`
		}
		if json.Unmarshal(ev.Data, &e) == nil {
			s.id, s.model = "chatcmpl-"+e.Message.ID, e.Message.Model
		}
		empty := ""
		werr = s.send(chat.Delta{Role: "assistant", Content: &empty}, nil, nil)
	case "content_block_start":
		var e struct {
			ContentBlock block `json:"content_block"`
		}
		if json.Unmarshal(ev.Data, &e) == nil && e.ContentBlock.Type == "tool_use" {
			s.tool++
			i := s.tool
			werr = s.send(chat.Delta{ToolCalls: []chat.ToolCall{{Index: &i, ID: e.ContentBlock.ID, Type: "function",
				Function: chat.FunctionCall{Name: e.ContentBlock.Name, Arguments: ""}}}}, nil, nil)
		}
	case "content_block_delta":
		var e struct {
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
		}
		if json.Unmarshal(ev.Data, &e) != nil {
			break
		}
		switch e.Delta.Type {
		case "text_delta":
			t := e.Delta.Text
			werr = s.send(chat.Delta{Content: &t}, nil, nil)
		case "input_json_delta":
			i := s.tool
			werr = s.send(chat.Delta{ToolCalls: []chat.ToolCall{{Index: &i, Function: chat.FunctionCall{Arguments: e.Delta.PartialJSON}}}}, nil, nil)
		}
	case "message_delta":
		var e struct {
			Delta struct {
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
		}
		if json.Unmarshal(ev.Data, &e) == nil && e.Delta.StopReason != "" {
			f := finishReason(e.Delta.StopReason)
			werr = s.send(chat.Delta{}, &f, nil)
		}
	case "message_stop":
		if s.c.StreamOptions != nil && s.c.StreamOptions.IncludeUsage {
			u := s.acc.in
			u.OutputTokens = s.acc.out
			werr = s.send(chat.Delta{}, nil, chatUsage(u))
		}
		if werr == nil {
			werr = s.sw.Raw([]byte("data: [DONE]\n\n"))
		}
	}
	return werr
}
