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
	"github.com/tollgate/tollgate/providers/sse"
)

// AnthropicVersion is the anthropic_version Bedrock takes in the body of
// a Claude model's InvokeModel call.
const AnthropicVersion = "bedrock-2023-05-31"

// messagesBody turns a Messages request into Bedrock's InvokeModel body for
// Claude: the model goes in the URL and the stream in the operation, not
// the body; anthropic_version is Bedrock's; anthropic-beta headers become
// the body's anthropic_beta.
func messagesBody(body []byte, beta string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("the body is not a JSON object")
	}
	delete(m, "model")
	delete(m, "stream")
	if _, ok := m["anthropic_version"]; !ok {
		m["anthropic_version"] = json.RawMessage(`"` + AnthropicVersion + `"`)
	}
	if _, ok := m["anthropic_beta"]; !ok && beta != "" {
		var betas []string
		for _, b := range strings.Split(beta, ",") {
			if b = strings.TrimSpace(b); b != "" {
				betas = append(betas, b)
			}
		}
		if len(betas) > 0 {
			m["anthropic_beta"], _ = json.Marshal(betas)
		}
	}
	return json.Marshal(m)
}

// messages serves an Anthropic Messages call from InvokeModel, or from
// InvokeModelWithResponseStream as Anthropic's server-sent events.
func (p *Provider) messages(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	var head struct {
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(r.Body, &head); err != nil {
		return providers.Result{}, p.badRequest(err)
	}
	body, err := messagesBody(r.Body, r.Header.Get("Anthropic-Beta"))
	if err != nil {
		return providers.Result{}, p.badRequest(err)
	}
	hdr := http.Header{"Accept": {"application/json"}}
	action := "invoke"
	if head.Stream {
		action = "invoke-with-response-stream"
		hdr = http.Header{"X-Amzn-Bedrock-Accept": {"application/json"}}
	}
	if t := p.tierOf(r.Class); t != "" {
		hdr.Set("X-Amzn-Bedrock-Service-Tier", t)
	}
	resp, perr := p.call(ctx, r.Model, action, body, hdr)
	if perr != nil {
		return providers.Result{}, perr
	}
	defer resp.Body.Close()
	requestID(w, resp)
	if head.Stream {
		return p.streamMessages(ctx, w, resp.Body)
	}
	b, err := providers.ReadAnswer(resp, providers.MaxAnswerBytes)
	if err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Err: err}
	}
	var m struct {
		Usage *anthropicUsage `json:"usage"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return providers.Result{}, &providers.Error{Provider: p.cfg.Name, Status: http.StatusBadGateway, Err: fmt.Errorf("undecodable Messages answer: %w", err)}
	}
	res := providers.Result{Status: http.StatusOK}
	if m.Usage != nil {
		res.Usage = m.Usage.usage()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return res, nil
}

// anthropicUsage is the Messages API's usage block: input without cache
// writes and reads, each apart.
type anthropicUsage struct {
	InputTokens              count `json:"input_tokens"`
	OutputTokens             count `json:"output_tokens"`
	CacheCreationInputTokens count `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     count `json:"cache_read_input_tokens"`
}

func (u anthropicUsage) usage() providers.Usage {
	return tokenUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, CacheWriteInputTokens: u.CacheCreationInputTokens}.usage()
}

// streamMessages relays InvokeModelWithResponseStream's chunks, each the
// bytes of one Anthropic stream event, as server-sent events named by
// their type. The usage is message_start's input and message_delta's
// output, reported once message_stop arrived.
func (p *Provider) streamMessages(ctx context.Context, w http.ResponseWriter, body io.Reader) (providers.Result, error) {
	fr := newFrames(body)
	ev, err := p.nextChunk(fr)
	if err != nil {
		var pe *providers.Error
		if errors.As(err, &pe) {
			return providers.Result{}, pe
		}
		return providers.Result{}, p.streamFailure(err)
	}
	res := providers.Result{Status: http.StatusOK}
	sse.Header(w, http.StatusOK)
	sw := sse.NewWriter(w)
	var u anthropicUsage
	var seen int64
	started, done := false, false
	for {
		typ := eventType(ev)
		switch typ {
		case "message_start":
			var e struct {
				Message struct {
					Usage anthropicUsage `json:"usage"`
				} `json:"message"`
			}
			if json.Unmarshal(ev, &e) == nil {
				u, started = e.Message.Usage, true
			}
		case "message_delta":
			var e struct {
				Usage *anthropicUsage `json:"usage"`
			}
			if json.Unmarshal(ev, &e) == nil && e.Usage != nil {
				u.OutputTokens = e.Usage.OutputTokens
				if e.Usage.InputTokens > 0 {
					u.InputTokens = e.Usage.InputTokens
				}
			}
		case "content_block_delta":
			seen++
		case "message_stop":
			done = true
		}
		if sw.Event(typ, ev) != nil {
			done = false // the client left
			break
		}
		if ev, err = p.nextChunk(fr); err != nil {
			if !errors.Is(err, io.EOF) {
				if ctx.Err() == nil { // ended by the gateway: its own event ends it
					_ = sw.Event("error", anthropicStreamError(err))
				}
				done = false
			}
			break
		}
	}
	res.Usage = u.usage()
	if !done {
		res.Usage.OutputTokens = max(res.Usage.OutputTokens, seen)
	}
	res.Usage.Reported = started && done
	return res, nil
}

// nextChunk returns the next chunk's event JSON; io.EOF at the end; an
// exception as *providers.Error.
func (p *Provider) nextChunk(fr *frames) ([]byte, error) {
	for {
		f, err := fr.next()
		if err != nil {
			return nil, err
		}
		if f.Code != "" {
			return nil, p.errorOf(f.Code, exceptionMessage(f.Payload), 0)
		}
		if f.Event != "chunk" {
			continue
		}
		var c struct {
			Bytes []byte `json:"bytes"` // base64 in the JSON
		}
		if err := json.Unmarshal(f.Payload, &c); err != nil {
			return nil, fmt.Errorf("%w: a chunk that is not JSON: %v", errBadFrame, err)
		}
		if !json.Valid(c.Bytes) {
			return nil, fmt.Errorf("%w: a chunk whose bytes are not a JSON event", errBadFrame)
		}
		return c.Bytes, nil
	}
}

// eventType reads an Anthropic event's "type".
func eventType(ev []byte) string {
	var e struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(ev, &e)
	if e.Type == "" {
		return "message"
	}
	return e.Type
}

// anthropicStreamError is the Messages stream's error event for a failure
// after the answer began.
func anthropicStreamError(err error) []byte {
	typ, msg := "api_error", err.Error()
	var pe *providers.Error
	if errors.As(err, &pe) {
		msg = pe.Err.Error()
		switch {
		case pe.Status == http.StatusTooManyRequests:
			typ = "rate_limit_error"
		case pe.Status == http.StatusServiceUnavailable:
			typ = "overloaded_error"
		case pe.Status < 500:
			typ = "invalid_request_error"
		}
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": "bedrock: " + msg}})
	return b
}
