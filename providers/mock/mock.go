// Package mock is the built-in provider that answers without an upstream:
// any model, deterministically, with a usage block. It makes tollgate
// usable with curl or an SDK and no account, and is the provider of the
// gateway's own tests.
//
// Usage is predictable: the input tokens are the gateway's own estimate of
// the prompt, the output tokens min(max_tokens, 16), 16 when max_tokens is
// unset.
package mock

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/sse"
)

// DefaultOutputTokens is the answer length when the client sets no cap.
const DefaultOutputTokens = 16

// Provider is the mock provider.
type Provider struct {
	name    string
	latency time.Duration
	// now stamps the "created" fields; fixed in tests.
	now func() time.Time
}

var _ providers.Provider = (*Provider)(nil)

// New returns a mock provider instance named name whose every answer is
// delayed by latency.
func New(name string, latency time.Duration) *Provider {
	return &Provider{name: name, latency: latency, now: time.Now}
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return p.name }

// Models implements providers.ModelLister.
func (p *Provider) Models() []string { return []string{"mock-1"} }

// words is the text the mock answers with, one word per output token.
var words = strings.Fields("tollgate mock answer: the request was admitted, forwarded and counted; " +
	"this text is deterministic so that tests and demos see the same tokens every time")

// Text returns the mock's answer of n tokens.
func Text(n int64) string {
	out := make([]string, n)
	for i := range out {
		out[i] = words[i%len(words)]
	}
	return strings.Join(out, " ")
}

// streamText sends text word by word, each word after the first with
// its leading space, until the client leaves or a send fails. It returns
// how many words were sent, which is the output usage so far, and whether
// all were.
func streamText(ctx context.Context, text string, send func(word string, last bool) error) (int64, bool) {
	ws := strings.Fields(text)
	for i, word := range ws {
		if ctx.Err() != nil {
			return int64(i), false // the client went away
		}
		if i > 0 {
			word = " " + word
		}
		if send(word, i == len(ws)-1) != nil {
			return int64(i), false
		}
	}
	return int64(len(ws)), true
}

func outputTokens(maxTokens int64) int64 {
	if maxTokens <= 0 {
		return DefaultOutputTokens
	}
	return min(maxTokens, DefaultOutputTokens)
}

// Serve implements providers.Provider.
func (p *Provider) Serve(ctx context.Context, w http.ResponseWriter, req *providers.Request) (providers.Result, error) {
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return providers.Result{}, &providers.Error{Provider: p.name, Err: ctx.Err()}
		case <-t.C:
		}
	}
	usage := providers.Usage{InputTokens: req.InputTokens, OutputTokens: outputTokens(req.MaxTokens), Reported: true}
	id := "mock-" + strconv.FormatInt(p.now().UnixNano(), 36) + strconv.FormatUint(uint64(rand.Uint32()), 36)
	switch req.Op {
	case providers.OpChat:
		if req.Stream {
			return p.streamChat(ctx, w, req, id, usage)
		}
		return writeJSON(w, usage, map[string]any{
			"id":      "chatcmpl-" + id,
			"object":  "chat.completion",
			"created": p.now().Unix(),
			"model":   req.Model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": Text(usage.OutputTokens)},
				"finish_reason": finishReason(req.MaxTokens),
			}},
			"usage": openAIUsage(usage),
		})
	case providers.OpResponses:
		return p.responses(ctx, w, req, id, usage)
	case providers.OpEmbeddings:
		if strings.HasPrefix(req.Path, ":") {
			return p.geminiEmbeddings(w, req, usage)
		}
		return p.embeddings(w, req, usage)
	case providers.OpCountTokens:
		return countTokens(w, req)
	case providers.OpRealtime:
		return p.realtime(w, req, id)
	case providers.OpMessages:
		return p.messages(ctx, w, req, id, usage)
	case providers.OpGenerate:
		return p.generate(ctx, w, req, usage)
	}
	return providers.Result{}, &providers.Error{
		Provider: p.name,
		Err:      fmt.Errorf("%s: %w", req.Op, providers.ErrUnsupported), Status: http.StatusBadRequest,
	}
}

func finishReason(maxTokens int64) string {
	if maxTokens > 0 && maxTokens <= DefaultOutputTokens {
		return "length"
	}
	return "stop"
}

func openAIUsage(u providers.Usage) map[string]any {
	return map[string]any{
		"prompt_tokens":     u.InputTokens,
		"completion_tokens": u.OutputTokens,
		"total_tokens":      u.InputTokens + u.OutputTokens,
	}
}

func writeJSON(w http.ResponseWriter, usage providers.Usage, body any) (providers.Result, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return providers.Result{}, err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return providers.Result{Status: http.StatusOK, Usage: usage}, nil
}

// streamChat streams an OpenAI chat completion: a role chunk, one chunk per
// word, a finish chunk, the usage chunk if the client asked for it, [DONE].
func (p *Provider) streamChat(ctx context.Context, w http.ResponseWriter, req *providers.Request, id string, usage providers.Usage) (providers.Result, error) {
	var opts struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(req.Body, &opts)
	created := p.now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": "chatcmpl-" + id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		}
	}
	sse.Header(w, http.StatusOK)
	sw := sse.NewWriter(w)
	res := providers.Result{Status: http.StatusOK, Usage: providers.Usage{InputTokens: usage.InputTokens}}
	send := func(v any) error {
		b, _ := json.Marshal(v)
		return sw.Event("", b)
	}
	if err := send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)); err != nil {
		return res, nil
	}
	var all bool
	res.Usage.OutputTokens, all = streamText(ctx, Text(usage.OutputTokens), func(word string, _ bool) error {
		return send(chunk(map[string]any{"content": word}, nil))
	})
	if !all {
		return res, nil // usage so far, not reported
	}
	if err := send(chunk(map[string]any{}, finishReason(req.MaxTokens))); err != nil {
		return res, nil
	}
	if opts.StreamOptions.IncludeUsage {
		u := map[string]any{
			"id": "chatcmpl-" + id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{}, "usage": openAIUsage(usage),
		}
		if err := send(u); err != nil {
			return res, nil
		}
	}
	if err := sw.Raw([]byte("data: [DONE]\n\n")); err != nil {
		return res, nil
	}
	res.Usage = usage
	return res, nil
}

// AcceptsAnyModel implements providers.AnyModel: the mock answers any id.
func (p *Provider) AcceptsAnyModel() bool { return true }

// Supports implements providers.Supporter.
func (p *Provider) Supports(op providers.Op) bool {
	switch op {
	case providers.OpChat, providers.OpResponses, providers.OpEmbeddings, providers.OpMessages, providers.OpGenerate,
		providers.OpCountTokens, providers.OpRealtime:
		return true
	}
	return false
}
