package bedrock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/chat"
	"github.com/tollgate/tollgate/providers/sse"
)

// chat serves an OpenAI chat completion from Converse, or from
// ConverseStream as chunks when it streams.
func (p *Provider) chat(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	var c chat.Request
	if err := json.Unmarshal(r.Body, &c); err != nil {
		return providers.Result{}, p.badRequest(err)
	}
	var n struct {
		N *int64 `json:"n"`
	}
	if json.Unmarshal(r.Body, &n) == nil && n.N != nil && *n.N > 1 {
		return providers.Result{}, p.badRequest(fmt.Errorf("%w: n > 1 (Converse answers with one choice)", providers.ErrUnsupported))
	}
	cr, err := toConverse(&c, p.tierOf(r.Class))
	if err != nil {
		return providers.Result{}, p.badRequest(fmt.Errorf("%w: %w", providers.ErrUnsupported, err))
	}
	body, _ := json.Marshal(cr)
	action, accept := "converse", "application/json"
	if c.Stream {
		action, accept = "converse-stream", "application/vnd.amazon.eventstream"
	}
	resp, perr := p.call(ctx, r.Model, action, body, http.Header{"Accept": {accept}})
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	requestID(w, resp)
	id := "chatcmpl-" + resp.Header.Get("X-Amzn-Requestid")
	if c.Stream {
		return p.streamChat(ctx, w, resp.Body, &c, r.Model, id)
	}
	b, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	var out converseResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway, Err: fmt.Errorf("undecodable Converse answer: %w", err)}
	}
	msg := chat.ResponseMessage{Role: "assistant"}
	var text strings.Builder
	for _, b := range out.Output.Message.Content {
		switch {
		case b.Text != nil:
			text.WriteString(*b.Text)
		case b.ToolUse != nil:
			args := string(b.ToolUse.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: b.ToolUse.ToolUseID, Type: "function",
				Function: chat.FunctionCall{Name: b.ToolUse.Name, Arguments: args}})
		}
	}
	if text.Len() > 0 || len(msg.ToolCalls) == 0 {
		s := text.String()
		msg.Content = &s
	}
	enc, _ := json.Marshal(chat.Response{
		ID: id, Object: "chat.completion", Created: p.cfg.Now().Unix(), Model: r.Model,
		Choices: []chat.Choice{{Index: 0, Message: msg, FinishReason: finishReason(out.StopReason)}},
		Usage:   out.Usage.chatUsage(),
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(enc)
	return providers.Result{Status: http.StatusOK, Usage: out.Usage.usage()}, nil
}

// The ConverseStream events translation reads.
type streamEvent struct {
	ContentBlockIndex int `json:"contentBlockIndex"`
	Start             *struct {
		ToolUse *struct {
			ToolUseID string `json:"toolUseId"`
			Name      string `json:"name"`
		} `json:"toolUse"`
	} `json:"start"`
	Delta *struct {
		Text    *string `json:"text"`
		ToolUse *struct {
			Input string `json:"input"`
		} `json:"toolUse"`
	} `json:"delta"`
	StopReason string      `json:"stopReason"`
	Usage      *tokenUsage `json:"usage"`
}

// streamChat translates a ConverseStream answer into chat completion
// chunks as its events arrive. The first frame is read before anything is
// written: an exception there (throttling, say) is an upstream error the
// gateway can fail over from. Later exceptions end the stream with an
// error event; the usage is then not reported.
func (p *Provider) streamChat(ctx context.Context, w http.ResponseWriter, body io.Reader, c *chat.Request, model, id string) (providers.Result, error) {
	fr := newFrames(body)
	first, err := fr.next()
	if err != nil {
		return providers.Result{}, p.streamFailure(err)
	}
	if first.Code != "" {
		return providers.Result{}, p.errorOf(first.Code, exceptionMessage(first.Payload), 0)
	}
	res := providers.Result{Status: http.StatusOK}
	sse.Header(w, http.StatusOK)
	s := converseStream{sw: sse.NewWriter(w), c: c, id: id, model: model, created: p.cfg.Now().Unix(), tools: map[int]int{}}
	for f := first; ; {
		if f.Code != "" {
			_ = s.sw.Event("", streamError(f.Code, exceptionMessage(f.Payload)))
			break
		}
		var ev streamEvent
		if err := json.Unmarshal(f.Payload, &ev); err != nil {
			_ = s.sw.Event("", streamError("InternalServerException", "undecodable event: "+err.Error()))
			break
		}
		if err := s.event(f.Event, &ev); err != nil {
			return partial(res, s.usage, s.seen, false), nil // the client left
		}
		if f, err = fr.next(); err != nil {
			if errors.Is(err, io.EOF) && s.stopped {
				_ = s.sw.Raw([]byte("data: [DONE]\n\n"))
				return partial(res, s.usage, s.seen, true), nil
			}
			if ctx.Err() == nil { // ended by the gateway (a stream's duration): its own event ends it
				_ = s.sw.Event("", streamError("InternalServerException", "the stream from Bedrock broke off"))
			}
			break
		}
	}
	return partial(res, s.usage, s.seen, false), nil
}

// converseStream translates one ConverseStream answer's events into chat
// completion chunks, keeping what its end needs.
type converseStream struct {
	sw        *sse.Writer
	c         *chat.Request
	id, model string
	created   int64
	tools     map[int]int // content block index → tool call index
	usage     *tokenUsage
	seen      int64 // deltas seen, a floor on the output when the stream breaks
	stopped   bool
}

// send writes one chunk: a delta, or the usage alone.
func (s *converseStream) send(delta chat.Delta, finish *string, usage *chat.Usage) error {
	ch := chat.Chunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model, Usage: usage,
		Choices: []chat.ChunkChoice{}}
	if usage == nil {
		ch.Choices = []chat.ChunkChoice{{Index: 0, Delta: delta, FinishReason: finish}}
	}
	b, _ := json.Marshal(ch)
	return s.sw.Event("", b)
}

// event translates one event; an error is the client's write failing.
func (s *converseStream) event(event string, ev *streamEvent) error {
	var werr error
	switch event {
	case "messageStart":
		empty := ""
		werr = s.send(chat.Delta{Role: "assistant", Content: &empty}, nil, nil)
	case "contentBlockStart":
		if ev.Start != nil && ev.Start.ToolUse != nil {
			i := len(s.tools)
			s.tools[ev.ContentBlockIndex] = i
			werr = s.send(chat.Delta{ToolCalls: []chat.ToolCall{{Index: &i, ID: ev.Start.ToolUse.ToolUseID, Type: "function",
				Function: chat.FunctionCall{Name: ev.Start.ToolUse.Name, Arguments: ""}}}}, nil, nil)
		}
	case "contentBlockDelta":
		s.seen++
		switch {
		case ev.Delta == nil:
		case ev.Delta.Text != nil:
			werr = s.send(chat.Delta{Content: ev.Delta.Text}, nil, nil)
		case ev.Delta.ToolUse != nil:
			i, ok := s.tools[ev.ContentBlockIndex]
			if ok {
				werr = s.send(chat.Delta{ToolCalls: []chat.ToolCall{{Index: &i, Function: chat.FunctionCall{Arguments: ev.Delta.ToolUse.Input}}}}, nil, nil)
			}
		}
	case "messageStop":
		s.stopped = true
		reason := finishReason(ev.StopReason)
		werr = s.send(chat.Delta{}, &reason, nil)
	case "metadata":
		if ev.Usage != nil {
			s.usage = ev.Usage
			if s.c.StreamOptions != nil && s.c.StreamOptions.IncludeUsage {
				werr = s.send(chat.Delta{}, nil, ev.Usage.chatUsage())
			}
		}
	}
	return werr
}

// partial sets a stream's usage: what its metadata event reported when the
// stream ended well, else at least one output token per delta seen, not
// Reported.
func partial(res providers.Result, u *tokenUsage, seen int64, complete bool) providers.Result {
	if u != nil {
		res.Usage = u.usage()
	}
	res.Usage.OutputTokens = max(res.Usage.OutputTokens, seen)
	res.Usage.Reported = complete && u != nil
	return res
}

// streamFailure is the error of a stream that broke before its first
// event: the upstream's, so the gateway may fail over.
func (p *Provider) streamFailure(err error) *providers.Error {
	return &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway, Err: err}
}

// exceptionMessage reads an exception event's {"message": …}.
func exceptionMessage(payload []byte) string {
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(payload, &m) == nil && m.Message != "" {
		return m.Message
	}
	return string(payload)
}

// streamError is the OpenAI stream's error event for a Bedrock exception
// after the answer began.
func streamError(code, msg string) []byte {
	typ := "server_error"
	if s := statusOf[code]; s == http.StatusTooManyRequests {
		typ = "rate_limit_error"
	} else if s > 0 && s < 500 {
		typ = "invalid_request_error"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": typ, "code": code, "message": "bedrock: " + code + ": " + msg}})
	return b
}
