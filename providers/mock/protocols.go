package mock

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/sse"
)

// responses answers the Responses API.
func (p *Provider) responses(ctx context.Context, w http.ResponseWriter, req *providers.Request, id string, usage providers.Usage) (providers.Result, error) {
	text := Text(usage.OutputTokens)
	resp := map[string]any{
		"id": "resp_" + id, "object": "response", "created_at": p.now().Unix(), "status": "completed", "model": req.Model,
		"output": []any{map[string]any{
			"type": "message", "id": "msg_" + id, "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
		}},
		"usage": map[string]any{
			"input_tokens": usage.InputTokens, "output_tokens": usage.OutputTokens,
			"total_tokens":         usage.InputTokens + usage.OutputTokens,
			"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		},
	}
	if !req.Stream {
		return writeJSON(w, usage, resp)
	}
	sse.Header(w, http.StatusOK)
	sw := sse.NewWriter(w)
	res := providers.Result{Status: http.StatusOK, Usage: providers.Usage{InputTokens: usage.InputTokens}}
	seq := 0
	emit := func(name string, v map[string]any) error {
		v["type"], v["sequence_number"] = name, seq
		seq++
		b, _ := json.Marshal(v)
		return sw.Event(name, b)
	}
	inProgress := map[string]any{"id": "resp_" + id, "object": "response", "status": "in_progress", "model": req.Model, "output": []any{}}
	if emit("response.created", map[string]any{"response": inProgress}) != nil {
		return res, nil
	}
	var all bool
	res.Usage.OutputTokens, all = streamText(ctx, text, func(word string, _ bool) error {
		return emit("response.output_text.delta", map[string]any{"item_id": "msg_" + id, "output_index": 0, "content_index": 0, "delta": word})
	})
	if !all {
		return res, nil
	}
	if emit("response.completed", map[string]any{"response": resp}) != nil {
		return res, nil
	}
	res.Usage = usage
	return res, nil
}

// embeddings answers with 8-dimensional vectors, one per input.
func (p *Provider) embeddings(w http.ResponseWriter, req *providers.Request, usage providers.Usage) (providers.Result, error) {
	var in struct {
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
	}
	_ = json.Unmarshal(req.Body, &in)
	n := 1
	var many []json.RawMessage
	if json.Unmarshal(in.Input, &many) == nil && len(many) > 0 {
		// An array of strings (or of token arrays) is several inputs; an
		// array of numbers is one tokenized input.
		if first := strings.TrimSpace(string(many[0])); strings.HasPrefix(first, `"`) || strings.HasPrefix(first, "[") {
			n = len(many)
		}
	}
	usage.OutputTokens = 0
	data := make([]any, n)
	for i := range data {
		vec := vector(i)
		var e any = vec
		if in.EncodingFormat == "base64" {
			e = base64Floats(vec)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
	}
	return writeJSON(w, usage, map[string]any{
		"object": "list", "data": data, "model": req.Model,
		"usage": map[string]any{"prompt_tokens": usage.InputTokens, "total_tokens": usage.InputTokens},
	})
}

// messages answers Anthropic's Messages API.
func (p *Provider) messages(ctx context.Context, w http.ResponseWriter, req *providers.Request, id string, usage providers.Usage) (providers.Result, error) {
	text := Text(usage.OutputTokens)
	stop := "end_turn"
	if req.MaxTokens > 0 && req.MaxTokens <= DefaultOutputTokens {
		stop = "max_tokens"
	}
	if !req.Stream {
		return writeJSON(w, usage, map[string]any{
			"id": "msg_" + id, "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": usage.InputTokens, "output_tokens": usage.OutputTokens,
				"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
		})
	}
	sse.Header(w, http.StatusOK)
	sw := sse.NewWriter(w)
	res := providers.Result{Status: http.StatusOK, Usage: providers.Usage{InputTokens: usage.InputTokens}}
	emit := func(name string, v map[string]any) error {
		v["type"] = name
		b, _ := json.Marshal(v)
		return sw.Event(name, b)
	}
	start := map[string]any{"id": "msg_" + id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": usage.InputTokens, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
	if emit("message_start", map[string]any{"message": start}) != nil ||
		emit("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) != nil {
		return res, nil
	}
	var all bool
	res.Usage.OutputTokens, all = streamText(ctx, text, func(word string, _ bool) error {
		return emit("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": word}})
	})
	if !all {
		return res, nil
	}
	if emit("content_block_stop", map[string]any{"index": 0}) != nil ||
		emit("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": usage.OutputTokens}}) != nil ||
		emit("message_stop", map[string]any{}) != nil {
		return res, nil
	}
	res.Usage = usage
	return res, nil
}

// generate answers Gemini's generateContent (Path ":generateContent") or
// streamGenerateContent.
func (p *Provider) generate(ctx context.Context, w http.ResponseWriter, req *providers.Request, usage providers.Usage) (providers.Result, error) {
	text := Text(usage.OutputTokens)
	finish := "STOP"
	if req.MaxTokens > 0 && req.MaxTokens <= DefaultOutputTokens {
		finish = "MAX_TOKENS"
	}
	meta := map[string]any{"promptTokenCount": usage.InputTokens, "candidatesTokenCount": usage.OutputTokens,
		"totalTokenCount": usage.InputTokens + usage.OutputTokens}
	candidate := func(t, finish string) []any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": t}}}, "index": 0}
		if finish != "" {
			c["finishReason"] = finish
		}
		return []any{c}
	}
	if !strings.HasSuffix(req.Path, "streamGenerateContent") {
		return writeJSON(w, usage, map[string]any{"candidates": candidate(text, finish), "usageMetadata": meta, "modelVersion": req.Model})
	}
	sse.Header(w, http.StatusOK)
	sw := sse.NewWriter(w)
	res := providers.Result{Status: http.StatusOK, Usage: providers.Usage{InputTokens: usage.InputTokens}}
	var all bool
	res.Usage.OutputTokens, all = streamText(ctx, text, func(word string, last bool) error {
		chunk := map[string]any{"candidates": candidate(word, ""), "modelVersion": req.Model}
		if last {
			chunk["candidates"] = candidate(word, finish)
			chunk["usageMetadata"] = meta
		}
		b, _ := json.Marshal(chunk)
		return sw.Event("", b)
	})
	if !all {
		return res, nil
	}
	res.Usage = usage
	return res, nil
}

// base64Floats encodes a vector as OpenAI does for encoding_format
// "base64": little-endian float32s, base64 (standard, padded).
func base64Floats(vec []float64) string {
	b := make([]byte, 0, 4*len(vec))
	for _, v := range vec {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// vector is the mock's embedding of input i: 8 deterministic dimensions.
func vector(i int) []float64 {
	vec := make([]float64, 8)
	for j := range vec {
		vec[j] = float64((i+1)*(j+1)%7) / 7
	}
	return vec
}

// geminiEmbeddings answers embedContent (one vector) and
// batchEmbedContents (one per request).
func (p *Provider) geminiEmbeddings(w http.ResponseWriter, req *providers.Request, usage providers.Usage) (providers.Result, error) {
	usage.OutputTokens = 0
	usage.Reported = false // Gemini reports no usage for embeddings
	if req.Path != ":batchEmbedContents" {
		return writeJSON(w, usage, map[string]any{"embedding": map[string]any{"values": vector(0)}})
	}
	var in struct {
		Requests []json.RawMessage `json:"requests"`
	}
	_ = json.Unmarshal(req.Body, &in)
	out := make([]any, len(in.Requests))
	for i := range out {
		out[i] = map[string]any{"values": vector(i)}
	}
	return writeJSON(w, usage, map[string]any{"embeddings": out})
}

// countTokens answers Anthropic's count_tokens and Gemini's countTokens
// with the gateway's own estimate; it uses nothing.
func countTokens(w http.ResponseWriter, req *providers.Request) (providers.Result, error) {
	none := providers.Usage{Reported: true}
	if req.Path == ":countTokens" {
		return writeJSON(w, none, map[string]any{"totalTokens": req.InputTokens})
	}
	return writeJSON(w, none, map[string]any{"input_tokens": req.InputTokens})
}

// realtime mints fake Realtime credentials in the shape of the route
// asked: client_secrets ({"value":…,"session":{…}}) or sessions.
func (p *Provider) realtime(w http.ResponseWriter, req *providers.Request, id string) (providers.Result, error) {
	expires := p.now().Add(time.Minute).Unix()
	session := map[string]any{"id": "sess_" + id, "object": "realtime.session", "type": "realtime", "model": req.Model}
	var body map[string]any
	if strings.HasSuffix(req.Path, "/client_secrets") {
		body = map[string]any{"value": "ek_mock_" + id, "expires_at": expires, "session": session}
	} else {
		body = session
		body["client_secret"] = map[string]any{"value": "ek_mock_" + id, "expires_at": expires}
	}
	res, err := writeJSON(w, providers.Usage{}, body)
	res.SessionID = "sess_" + id
	return res, err
}
