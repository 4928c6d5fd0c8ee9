package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/providers"
)

// chatRequest is what admission reads of an OpenAI chat completion; the
// body itself goes upstream untouched (apart from what an adapter adds).
type chatRequest struct {
	Model               *string       `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Stream              bool          `json:"stream"`
	MaxTokens           *int64        `json:"max_tokens"`
	MaxCompletionTokens *int64        `json:"max_completion_tokens"`
	N                   *int64        `json:"n"`
	Tools               rawText       `json:"tools"`
}

type chatMessage struct {
	Role       string  `json:"role"`
	Content    content `json:"content"`
	ToolCalls  rawText `json:"tool_calls"`
	Name       string  `json:"name"`
	ToolCallID string  `json:"tool_call_id"`
}

// content is a message content: a string, or an array of parts of which
// the text parts count.
type content string

func (c *content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*c = ""
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = content(s)
	case b[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var sb strings.Builder
		for _, p := range parts {
			sb.WriteString(p.Text)
			if p.Type != "text" && p.Type != "input_text" && p.Type != "" {
				// An image or audio part: its cost is the provider's
				// business; count a fixed allowance so it is not free.
				sb.WriteString(strings.Repeat(" x", imagePartTokens))
			}
		}
		*c = content(sb.String())
	default:
		return errors.New("content must be a string or an array of parts")
	}
	return nil
}

// imagePartTokens is the reservation allowance of a non-text part.
const imagePartTokens = 85

// rawText is JSON kept as text, counted for its tokens.
type rawText string

func (r *rawText) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	*r = rawText(b)
	return nil
}

// Per-message overhead of chat formats, as OpenAI documents it for its
// models: ~4 tokens a message plus 3 priming the reply.
const (
	tokensPerMessage = 4
	tokensPerReply   = 3
)

func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	var req chatRequest
	caller, body, ok := h.beginJSON(w, r, proto, &req)
	if !ok {
		return
	}
	if req.Model == nil || *req.Model == "" {
		missingModel(w, proto)
		return
	}
	if len(req.Messages) == 0 {
		badRequest(w, proto, "messages", "messages must be a non-empty array")
		return
	}
	capField, capValue := "max_tokens", req.MaxTokens
	if req.MaxCompletionTokens != nil {
		capField, capValue = "max_completion_tokens", req.MaxCompletionTokens
	}
	maxTokens, ok := positive(w, proto, capField, capValue)
	if !ok {
		return
	}
	choices, ok := bounded(w, proto, "n", req.N, providers.MaxChoices)
	if !ok {
		return
	}
	model := *req.Model
	in := int64(tokensPerReply) + h.cfg.Estimator.Count(model, string(req.Tools))
	for _, m := range req.Messages {
		in += tokensPerMessage + h.cfg.Estimator.Count(model, string(m.Content)+string(m.ToolCalls))
	}
	h.serve(w, r, &exchange{
		proto:       proto,
		op:          providers.OpChat,
		model:       model,
		body:        body,
		stream:      req.Stream,
		maxTokens:   maxTokens,
		choices:     choices,
		inputTokens: in,
		caller:      caller,
		header:      r.Header,
		capField:    capField,
	})
}

// badJSON answers a body that is not the JSON the route expects.
func badJSON(w http.ResponseWriter, proto providers.Protocol, err error) {
	msg := "invalid JSON body: " + err.Error()
	var te *json.UnmarshalTypeError
	if ok := asTypeError(err, &te); ok && te.Field != "" {
		msg = "invalid JSON body: field " + strconv.Quote(te.Field) + " has the wrong type"
		writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, param: te.Field, message: msg}, 0)
		return
	}
	writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, message: msg}, 0)
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	return errors.As(err, te)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
