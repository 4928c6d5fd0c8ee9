package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/jsonx"
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
	caller, body, valid, ok := h.beginChecked(w, r, proto)
	if !ok {
		return
	}
	// The fast parse takes no body with a member named ours but for case
	// (foldsTo): only one it leaves to the decoder may need refusing, at
	// the top or in a message or a content part, all of which the decoder
	// reads ignoring case.
	req, fast := parseChat(body, valid)
	if !fast && (refuseFolded(w, proto, body, "", chatKeys...) || refuseFoldedMessages(w, proto, body)) {
		return
	}
	if !fast {
		// Anything the scan does not take as plain is decoded, for the
		// decoder's own answer to what is wrong with it.
		req = chatRequest{}
		if err := json.Unmarshal(body, &req); err != nil {
			badJSON(w, proto, err)
			return
		}
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
		once:        valid,
		stream:      req.Stream,
		maxTokens:   maxTokens,
		choices:     choices,
		inputTokens: in,
		caller:      caller,
		header:      r.Header,
		capField:    capField,
	})
}

// refuseFoldedMessages is refuseFolded for each message of a chat body
// and each part of a message's content: a member named as one the
// gateway reads but for case ("CONTENT") would be read by the decoder in
// its place, and the upstream, reading names exactly, would send the
// other. It reports whether it answered.
func refuseFoldedMessages(w http.ResponseWriter, proto providers.Protocol, body []byte) bool {
	msgs, ok := jsonx.Member(body, "messages")
	if !ok {
		return false
	}
	answered := false
	i := 0
	_ = jsonx.Elements(msgs, func(m []byte) bool {
		at := "messages[" + strconv.Itoa(i) + "]."
		i++
		if m[0] != '{' {
			return true
		}
		if answered = refuseFolded(w, proto, m, at, messageKeys...); answered {
			return false
		}
		parts, ok := jsonx.Member(m, "content")
		if !ok || parts[0] != '[' {
			return true
		}
		j := 0
		_ = jsonx.Elements(parts, func(p []byte) bool {
			pat := at + "content[" + strconv.Itoa(j) + "]."
			j++
			answered = p[0] == '{' && refuseFolded(w, proto, p, pat, "type", "text")
			return !answered
		})
		return !answered
	})
	return answered
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

// parseChat reads a chat completion request the fast way, a scan of the
// members admission needs of a body known to be valid JSON, nothing
// decoded by reflection. It reports false, and the caller decodes, for
// anything unusual (an escaped model name, a member of an unexpected type,
// content in parts) or a body that is not valid, so that both ways read
// every request alike.
func parseChat(body []byte, valid bool) (chatRequest, bool) {
	var req chatRequest
	if !valid {
		return req, false
	}
	// The strings read are cut from one copy of the body, and the numbers
	// kept in one place: a few allocations a request, not one each.
	text := bodyText{b: body, s: string(body)}
	var nums struct {
		model                       string
		maxTokens, maxCompletion, n int64
	}
	plain := true
	err := jsonx.Fields(body, func(key []byte, start, end int) bool {
		v := body[start:end]
		switch string(key) {
		case `"model"`:
			// A string of its own: the model is kept (a target, a key of
			// the latencies kept), the body's copy must not be with it.
			nums.model, plain = text.plainString(v)
			nums.model = strings.Clone(nums.model)
			req.Model = &nums.model
		case `"messages"`:
			if v[0] != '[' {
				plain = false
				break
			}
			req.Messages, plain = parseMessages(v, text)
		case `"stream"`:
			switch string(v) {
			case "true":
				req.Stream = true
			case "false", "null":
			default:
				plain = false
			}
		case `"max_tokens"`:
			req.MaxTokens, plain = plainInt(v, &nums.maxTokens)
		case `"max_completion_tokens"`:
			req.MaxCompletionTokens, plain = plainInt(v, &nums.maxCompletion)
		case `"n"`:
			req.N, plain = plainInt(v, &nums.n)
		case `"tools"`:
			if string(v) != "null" {
				req.Tools = rawText(text.cut(v))
			}
		default:
			// The decoder matches member names ignoring case: a key that
			// might be one of ours, spelled otherwise, is left to it.
			plain = !foldsTo(key, chatKeys)
		}
		return plain
	})
	return req, err == nil && plain
}

// bodyText is a body and one copy of it as a string, to cut the strings a
// parse reads from.
type bodyText struct {
	b []byte
	s string
}

// cut returns v, a slice of the body, as a string.
func (t bodyText) cut(v []byte) string {
	at := cap(t.b) - cap(v) // v is a slice of t.b
	return t.s[at : at+len(v)]
}

// plainString returns the text of a JSON string, a slice of the body,
// with no escape in it and valid UTF-8 (what the decoder would give
// unchanged).
func (t bodyText) plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		return "", false
	}
	return t.cut(v[1 : len(v)-1]), true
}

var (
	chatKeys    = []string{"model", "messages", "stream", "max_tokens", "max_completion_tokens", "n", "tools"}
	messageKeys = []string{"content", "tool_calls", "role", "name", "tool_call_id"}
)

// foldsTo reports whether a raw member name is escaped or equals one of
// names but for case, as jsonx.Folded compares them (so that a body the
// fast parse takes has no member refuseFolded would refuse).
func foldsTo(key []byte, names []string) bool {
	if bytes.IndexByte(key, '\\') >= 0 {
		return true
	}
	k := key[1 : len(key)-1]
	for _, n := range names {
		if strings.EqualFold(string(k), n) {
			return true
		}
	}
	return false
}

func parseMessages(v []byte, text bodyText) ([]chatMessage, bool) {
	msgs := make([]chatMessage, 0, 4) // not nil, as the decoder makes of []
	plain := true
	err := jsonx.Elements(v, func(e []byte) bool {
		if e[0] != '{' {
			plain = false
			return false
		}
		var m chatMessage
		jsonx.Fields(e, func(key []byte, start, end int) bool {
			v := e[start:end]
			switch string(key) {
			case `"content"`:
				switch {
				case string(v) == "null":
				case v[0] == '"':
					s, ok := text.plainString(v)
					m.Content, plain = content(s), ok
				default:
					plain = false // parts, or not content at all: decode
				}
			case `"tool_calls"`:
				if string(v) != "null" {
					m.ToolCalls = rawText(text.cut(v))
				}
			case `"role"`, `"name"`, `"tool_call_id"`:
				if string(v) == "null" {
					break
				}
				var str string
				str, plain = text.plainString(v)
				switch string(key) {
				case `"role"`:
					m.Role = str
				case `"name"`:
					m.Name = str
				default:
					m.ToolCallID = str
				}
			default:
				plain = !foldsTo(key, messageKeys)
			}
			return plain
		})
		msgs = append(msgs, m)
		return plain
	})
	return msgs, err == nil && plain
}

// plainInt reads an integer member into *n; null is absent.
func plainInt(v []byte, n *int64) (*int64, bool) {
	if string(v) == "null" {
		return nil, true
	}
	var err error
	if *n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
		return nil, false
	}
	return n, true
}
