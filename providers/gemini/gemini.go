// Package gemini is the adapter for Google's Gemini API
// (generativelanguage.googleapis.com): native generateContent calls pass
// through, and OpenAI chat completions are translated to
// generateContent and back, streams included.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/chat"
	"github.com/tollgate/tollgate/providers/sse"
)

// Config configures one Gemini provider instance.
type Config struct {
	Name    string
	BaseURL string // default https://generativelanguage.googleapis.com
	APIKey  string
	Models  []string
	Timeout time.Duration
	Client  *http.Client
	Now     func() time.Time
}

// Provider is a Gemini provider.
type Provider struct {
	cfg    Config
	client *http.Client
}

var _ providers.Provider = (*Provider)(nil)

// New returns a Provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Name == "" {
		return nil, errors.New("gemini: name is required")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://generativelanguage.googleapis.com"
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := cfg.Client
	if c == nil {
		c = providers.NewHTTPClient(cfg.Timeout)
	}
	return &Provider{cfg: cfg, client: c}, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return p.cfg.Name }

// Models implements providers.ModelLister.
func (p *Provider) Models() []string { return p.cfg.Models }

// AcceptsAnyModel implements providers.AnyModel.
func (p *Provider) AcceptsAnyModel() bool { return len(p.cfg.Models) == 0 }

// Serve implements providers.Provider.
func (p *Provider) Serve(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	switch r.Op {
	case providers.OpGenerate:
		return p.generate(ctx, w, r)
	case providers.OpEmbeddings, providers.OpCountTokens:
		// Native embedContent, batchEmbedContents and countTokens: Path
		// holds the action, sent as it is.
		if strings.HasPrefix(r.Path, ":") {
			return p.generate(ctx, w, r)
		}
	case providers.OpChat:
		return p.chat(ctx, w, r)
	}
	return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest,
		Err: fmt.Errorf("%s: %w", r.Op, providers.ErrUnsupported)}
}

// call posts body to model:action.
func (p *Provider) call(ctx context.Context, model, action string, stream bool, body []byte) (*http.Response, *providers.Error) {
	u := p.cfg.BaseURL + "/v1beta/models/" + url.PathEscape(model) + ":" + action
	if stream {
		u += "?alt=sse"
	}
	req, err := providers.NewRequest(ctx, http.MethodPost, u, body, http.Header{})
	if err != nil {
		return nil, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	req.Header.Set("X-Goog-Api-Key", p.cfg.APIKey)
	return providers.Send(p.client, p.cfg.Name, req)
}

// usageMetadata is Gemini's usage block.
type usageMetadata struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	TotalTokenCount         int64 `json:"totalTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
}

func (u *usageMetadata) toUsage() providers.Usage {
	return providers.Usage{
		InputTokens:       u.PromptTokenCount,
		OutputTokens:      u.CandidatesTokenCount + u.ThoughtsTokenCount,
		CachedInputTokens: u.CachedContentTokenCount,
		CachedInInput:     true, // promptTokenCount includes the cached content
		Reported:          true,
	}
}

// generate passes a native generateContent or streamGenerateContent call
// through (Path holds the action).
func (p *Provider) generate(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	action := strings.TrimPrefix(r.Path, ":")
	stream := action == "streamGenerateContent"
	resp, perr := p.call(ctx, r.Model, action, stream, r.Body)
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	res := providers.Result{Status: resp.StatusCode}
	providers.CopyHeaders(w, resp)
	if stream {
		sse.Header(w, resp.StatusCode)
		sw := sse.NewWriter(w)
		rd := sse.NewReader(resp.Body)
		rd.RelayTo(sw)
		defer rd.Close()
		for {
			ev, err := rd.Next()
			if err != nil {
				if sw.Err() != nil {
					res.Usage.Reported = false // the client did not get it all
				}
				return res, nil
			}
			var g genResponse
			if json.Unmarshal(ev.Data, &g) == nil && g.UsageMetadata != nil {
				res.Usage = g.UsageMetadata.toUsage()
			}
			if err := sw.Relay(ev.Raw); err != nil {
				res.Usage.Reported = false
				return res, nil
			}
		}
	}
	b, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err != nil {
		return res, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	var g genResponse
	if json.Unmarshal(b, &g) == nil && g.UsageMetadata != nil {
		res.Usage = g.UsageMetadata.toUsage()
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
	return res, nil
}

// The generateContent wire format, as far as translation needs it.
type genRequest struct {
	Contents          []content  `json:"contents"`
	SystemInstruction *content   `json:"systemInstruction,omitempty"`
	GenerationConfig  *genConfig `json:"generationConfig,omitempty"`
	Tools             []genTool  `json:"tools,omitempty"`
}

type content struct {
	Role  string `json:"role,omitempty"`
	Parts []part `json:"parts"`
}

type part struct {
	Text             string            `json:"text,omitempty"`
	InlineData       *inlineData       `json:"inlineData,omitempty"`
	FunctionCall     *functionCall     `json:"functionCall,omitempty"`
	FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
}

type inlineData struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type functionCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type functionResponse struct {
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

type genConfig struct {
	MaxOutputTokens *int64   `json:"maxOutputTokens,omitempty"`
	Temperature     *float64 `json:"temperature,omitempty"`
	TopP            *float64 `json:"topP,omitempty"`
	StopSequences   []string `json:"stopSequences,omitempty"`
}

type genTool struct {
	FunctionDeclarations []funcDecl `json:"functionDeclarations"`
}

type funcDecl struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type genResponse struct {
	Candidates []struct {
		Content      content `json:"content"`
		FinishReason string  `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *usageMetadata `json:"usageMetadata"`
	ModelVersion  string         `json:"modelVersion"`
	ResponseID    string         `json:"responseId"`
}

// toGenerate translates a chat completion request.
func toGenerate(c *chat.Request) (*genRequest, error) {
	g := &genRequest{}
	var system []part
	names := map[string]string{} // tool call id → function name, for tool results
	for i, m := range c.Messages {
		switch m.Role {
		case "system", "developer":
			system = append(system, part{Text: m.Content.String()})
		case "user":
			parts, err := userParts(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			g.Contents = append(g.Contents, content{Role: "user", Parts: parts})
		case "assistant":
			var parts []part
			if t := m.Content.String(); t != "" {
				parts = append(parts, part{Text: t})
			}
			for _, tc := range m.ToolCalls {
				args := json.RawMessage(tc.Function.Arguments)
				if !json.Valid(args) || len(args) == 0 {
					args = json.RawMessage(`{}`)
				}
				names[tc.ID] = tc.Function.Name
				parts = append(parts, part{FunctionCall: &functionCall{Name: tc.Function.Name, Args: args}})
			}
			if len(parts) > 0 {
				g.Contents = append(g.Contents, content{Role: "model", Parts: parts})
			}
		case "tool":
			resp, _ := json.Marshal(map[string]string{"result": m.Content.String()})
			g.Contents = append(g.Contents, content{Role: "user", Parts: []part{{FunctionResponse: &functionResponse{Name: names[m.ToolCallID], Response: resp}}}})
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	if len(system) > 0 {
		g.SystemInstruction = &content{Parts: system}
	}
	cfg := genConfig{Temperature: c.Temperature, TopP: c.TopP, StopSequences: c.Stop}
	if n := c.MaxOutput(); n > 0 {
		cfg.MaxOutputTokens = &n
	}
	g.GenerationConfig = &cfg
	if len(c.Tools) > 0 {
		var decls []funcDecl
		for _, t := range c.Tools {
			decls = append(decls, funcDecl{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
		}
		g.Tools = []genTool{{FunctionDeclarations: decls}}
	}
	return g, nil
}

func userParts(c chat.Content) ([]part, error) {
	if !c.IsParts {
		return []part{{Text: c.Text}}, nil
	}
	var out []part
	for _, p := range c.Parts {
		switch p.Type {
		case "text":
			out = append(out, part{Text: p.Text})
		case "image_url":
			if p.ImageURL == nil {
				return nil, errors.New("image_url part without a url")
			}
			rest, ok := strings.CutPrefix(p.ImageURL.URL, "data:")
			media, data, ok2 := strings.Cut(rest, ";base64,")
			if !ok || !ok2 {
				return nil, errors.New("Gemini takes images as base64 data URLs")
			}
			out = append(out, part{InlineData: &inlineData{MimeType: media, Data: data}})
		default:
			return nil, fmt.Errorf("content part type %q cannot be sent to Gemini", p.Type)
		}
	}
	return out, nil
}

var finishReasons = map[string]string{
	"STOP":       "stop",
	"MAX_TOKENS": "length",
	"SAFETY":     "content_filter",
	"RECITATION": "content_filter",
	"BLOCKLIST":  "content_filter",
}

func finishReason(f string) string {
	if r, ok := finishReasons[f]; ok {
		return r
	}
	return "stop"
}

func chatUsage(u *usageMetadata) *chat.Usage {
	if u == nil {
		return nil
	}
	cu := &chat.Usage{
		PromptTokens:     u.PromptTokenCount,
		CompletionTokens: u.CandidatesTokenCount + u.ThoughtsTokenCount,
	}
	cu.TotalTokens = cu.PromptTokens + cu.CompletionTokens
	if u.CachedContentTokenCount > 0 {
		cu.PromptTokensDetails = &chat.PromptDetails{CachedTokens: u.CachedContentTokenCount}
	}
	return cu
}

// chat serves an OpenAI chat completion from generateContent.
func (p *Provider) chat(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	var c chat.Request
	if err := json.Unmarshal(r.Body, &c); err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: err}
	}
	g, err := toGenerate(&c)
	if err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Err: fmt.Errorf("%w: %w", providers.ErrUnsupported, err)}
	}
	body, _ := json.Marshal(g)
	action := "generateContent"
	if c.Stream {
		action = "streamGenerateContent"
	}
	resp, perr := p.call(ctx, r.Model, action, c.Stream, body)
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	res := providers.Result{Status: http.StatusOK}
	providers.CopyHeaders(w, resp)
	id := "chatcmpl-gemini-" + fmt.Sprint(p.cfg.Now().UnixNano())
	created := p.cfg.Now().Unix()
	if c.Stream {
		return p.streamChat(w, resp, res, &c, id, created, r.Model)
	}
	b, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err != nil {
		return res, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	var gr genResponse
	if err := json.Unmarshal(b, &gr); err != nil {
		return res, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway, Err: fmt.Errorf("undecodable Gemini answer: %w", err)}
	}
	out := chat.Response{ID: id, Object: "chat.completion", Created: created, Model: r.Model, Usage: chatUsage(gr.UsageMetadata)}
	if gr.ModelVersion != "" {
		out.Model = gr.ModelVersion
	}
	msg := chat.ResponseMessage{Role: "assistant"}
	finish := "stop"
	if len(gr.Candidates) > 0 {
		cand := gr.Candidates[0]
		text, calls := partsOut(cand.Content.Parts, 0)
		msg.ToolCalls = calls
		if text != "" || len(calls) == 0 {
			msg.Content = &text
		}
		finish = finishReason(cand.FinishReason)
		if len(calls) > 0 {
			finish = "tool_calls"
		}
	}
	out.Choices = []chat.Choice{{Index: 0, Message: msg, FinishReason: finish}}
	if gr.UsageMetadata != nil {
		res.Usage = gr.UsageMetadata.toUsage()
	}
	enc, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(enc)
	return res, nil
}

// partsOut splits parts into text and tool calls (numbered from first).
func partsOut(parts []part, first int) (string, []chat.ToolCall) {
	var text strings.Builder
	var calls []chat.ToolCall
	for _, pt := range parts {
		text.WriteString(pt.Text)
		if pt.FunctionCall != nil {
			i := first + len(calls)
			args := string(pt.FunctionCall.Args)
			if args == "" {
				args = "{}"
			}
			calls = append(calls, chat.ToolCall{Index: &i, ID: fmt.Sprintf("call_%d", i), Type: "function",
				Function: chat.FunctionCall{Name: pt.FunctionCall.Name, Arguments: args}})
		}
	}
	return text.String(), calls
}

// streamChat translates a streamGenerateContent stream chunk by chunk.
func (p *Provider) streamChat(w http.ResponseWriter, resp *http.Response, res providers.Result, c *chat.Request, id string, created int64, model string) (providers.Result, error) {
	sse.Header(w, http.StatusOK)
	sw := sse.NewWriter(w)
	rd := sse.NewReader(resp.Body)
	defer rd.Close()
	send := func(ch chat.Chunk) error {
		ch.ID, ch.Object, ch.Created, ch.Model = id, "chat.completion.chunk", created, model
		b, _ := json.Marshal(ch)
		return sw.Event("", b)
	}
	empty := ""
	if err := send(chat.Chunk{Choices: []chat.ChunkChoice{{Delta: chat.Delta{Role: "assistant", Content: &empty}}}}); err != nil {
		return res, nil
	}
	var last *usageMetadata
	calls, finish := 0, ""
	var outChunks int64
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		var gr genResponse
		if json.Unmarshal(ev.Data, &gr) != nil {
			continue
		}
		if gr.UsageMetadata != nil {
			last = gr.UsageMetadata
		}
		if len(gr.Candidates) == 0 {
			continue
		}
		cand := gr.Candidates[0]
		text, tcs := partsOut(cand.Content.Parts, calls)
		calls += len(tcs)
		if text != "" || len(tcs) > 0 {
			d := chat.Delta{ToolCalls: tcs}
			if text != "" {
				d.Content = &text
			}
			if err := send(chat.Chunk{Choices: []chat.ChunkChoice{{Delta: d}}}); err != nil {
				res.Usage = streamUsage(last, outChunks, false)
				return res, nil
			}
			outChunks++
		}
		if cand.FinishReason != "" {
			finish = finishReason(cand.FinishReason)
			if calls > 0 {
				finish = "tool_calls"
			}
		}
	}
	if finish == "" {
		// The stream ended without a finish reason: it broke.
		res.Usage = streamUsage(last, outChunks, false)
		return res, nil
	}
	if err := send(chat.Chunk{Choices: []chat.ChunkChoice{{Delta: chat.Delta{}, FinishReason: &finish}}}); err != nil {
		res.Usage = streamUsage(last, outChunks, false)
		return res, nil
	}
	if c.StreamOptions != nil && c.StreamOptions.IncludeUsage && last != nil {
		_ = send(chat.Chunk{Choices: []chat.ChunkChoice{}, Usage: chatUsage(last)})
	}
	_ = sw.Raw([]byte("data: [DONE]\n\n"))
	res.Usage = streamUsage(last, outChunks, true)
	return res, nil
}

func streamUsage(u *usageMetadata, chunks int64, complete bool) providers.Usage {
	if u == nil {
		return providers.Usage{OutputTokens: chunks}
	}
	out := u.toUsage()
	out.Reported = complete
	return out
}

// Supports implements providers.Supporter.
func (p *Provider) Supports(op providers.Op) bool {
	return op == providers.OpGenerate || op == providers.OpChat || op == providers.OpEmbeddings || op == providers.OpCountTokens
}
