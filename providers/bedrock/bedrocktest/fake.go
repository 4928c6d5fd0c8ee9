// Package bedrocktest is a fake of the Bedrock Runtime API on 127.0.0.1
// for tests: it speaks the real wire formats (JSON for Converse and
// InvokeModel; application/vnd.amazon.eventstream frames, written with the
// AWS SDK's own event-stream encoder, for ConverseStream and
// InvokeModelWithResponseStream), checks that every request carries a
// valid SigV4 signature for service bedrock in its region, and throttles,
// breaks streams or reports hostile usage on demand.
package bedrocktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Credentials the fake accepts (and signs its checks with).
const (
	AccessKey = "AKIDBEDROCKTEST"
	SecretKey = "bedrock-test-secret"
)

// Request is one call the fake answered (or refused).
type Request struct {
	Op     string // converse, converse-stream, invoke, invoke-with-response-stream
	Model  string // the model id, unescaped
	Header http.Header
	Body   []byte
}

// Usage is what the fake reports an answer used. Raw, when set, is sent
// as the usage object verbatim (hostile numbers).
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
	Raw                                  string
}

// Fake is the fake Bedrock Runtime.
type Fake struct {
	*httptest.Server
	Region string

	mu       sync.Mutex
	reqs     []Request
	throttle map[string]int // model → throttles left (<0: always)
	usage    Usage
	delay    time.Duration
	broken   map[string]string // model → how its streams break: "exception", "malformed"
	hold     <-chan struct{}   // when set, answers wait until it is closed
}

// New starts a fake for region on 127.0.0.1 and stops it with the test.
func New(t interface {
	Cleanup(func())
}, region string) *Fake {
	f := &Fake{Region: region, throttle: map[string]int{}, broken: map[string]string{},
		usage: Usage{Input: 100, Output: 200}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// Hold makes every call wait, once recorded, until release is closed (or
// its caller leaves): a test can decide requests while the ones before
// them are still in flight, unanswered and so unsettled.
func (f *Fake) Hold(release <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = release
}

// Throttle makes the next n calls to model answer ThrottlingException
// (n < 0: every call).
func (f *Fake) Throttle(model string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle[model] = n
}

// SetUsage sets what answers report having used.
func (f *Fake) SetUsage(u Usage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.usage = u
}

// SetFrameDelay makes streams wait d before each frame after the first.
func (f *Fake) SetFrameDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// Break makes model's streams break after their first events: "exception"
// sends a modelStreamErrorException frame, "malformed" bytes that are no
// frame, "first" a throttlingException as the very first frame.
func (f *Fake) Break(model, how string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broken[model] = how
}

// Requests returns the calls so far.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.reqs...)
}

// Calls counts the calls made to model that reached an answer or a
// throttle (not those refused for their signature).
func (f *Fake) Calls(model string) int {
	n := 0
	for _, r := range f.Requests() {
		if r.Model == model {
			n++
		}
	}
	return n
}

// Last returns the last call.
func (f *Fake) Last() Request {
	rs := f.Requests()
	if len(rs) == 0 {
		return Request{}
	}
	return rs[len(rs)-1]
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err := f.checkSignature(r, body); err != nil {
		writeError(w, http.StatusForbidden, "InvalidSignatureException", err.Error())
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if r.Method != http.MethodPost || len(parts) != 3 || parts[0] != "model" {
		writeError(w, http.StatusNotFound, "UnknownOperationException", r.Method+" "+r.URL.Path)
		return
	}
	model, err := url.PathUnescape(parts[1])
	if err != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", "bad model id")
		return
	}
	op := parts[2]
	f.mu.Lock()
	f.reqs = append(f.reqs, Request{Op: op, Model: model, Header: r.Header.Clone(), Body: body})
	n, throttled := f.throttle[model]
	if throttled && n != 0 {
		f.throttle[model] = n - 1
	}
	u, delay, broken, hold := f.usage, f.delay, f.broken[model], f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if throttled && n != 0 {
		writeError(w, http.StatusTooManyRequests, "ThrottlingException", "Too many requests, please wait before trying again.")
		return
	}
	a := answer{w: w, model: model, usage: u, delay: delay, broken: broken}
	switch op {
	case "converse":
		a.converse(body, false)
	case "converse-stream":
		a.converse(body, true)
	case "invoke":
		a.invoke(body, false)
	case "invoke-with-response-stream":
		a.invoke(body, true)
	default:
		writeError(w, http.StatusNotFound, "UnknownOperationException", op)
	}
}

// checkSignature refuses a request that is not signed with SigV4 for
// service bedrock in the fake's region with its credentials: the scope of
// the Authorization header is checked, and the signature recomputed over
// the headers it names and the body.
func (f *Fake) checkSignature(r *http.Request, body []byte) error {
	auth := r.Header.Get("Authorization")
	const algo = "AWS4-HMAC-SHA256 Credential="
	if !strings.HasPrefix(auth, algo) {
		return fmt.Errorf("missing SigV4 Authorization header")
	}
	cred, _, _ := strings.Cut(strings.TrimPrefix(auth, algo), ",")
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[0] != AccessKey || scope[2] != f.Region || scope[3] != "bedrock" || scope[4] != "aws4_request" {
		return fmt.Errorf("credential scope %q is not %s/<date>/%s/bedrock/aws4_request", cred, AccessKey, f.Region)
	}
	_, signed, _ := strings.Cut(auth, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %v", err)
	}
	check, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	for _, h := range strings.Split(signed, ";") {
		if h != "host" {
			check.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	check.Header.Del("Authorization")
	check.Host = r.Host
	sum := sha256.Sum256(body)
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey,
		SessionToken: r.Header.Get("X-Amz-Security-Token")}, check, hex.EncodeToString(sum[:]), "bedrock", f.Region, at)
	if err != nil || check.Header.Get("Authorization") != auth {
		return fmt.Errorf("the signature does not match")
	}
	return nil
}

// writeError answers as Bedrock does: the code in X-Amzn-ErrorType, the
// message in the body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Amzn-Errortype", code+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"message": msg})
	_, _ = w.Write(b)
}

// answer writes one answer.
type answer struct {
	w      http.ResponseWriter
	model  string
	usage  Usage
	delay  time.Duration
	broken string
	enc    *eventstream.Encoder
	frames int
}

func (a *answer) usageJSON(names [4]string) json.RawMessage {
	if a.usage.Raw != "" {
		return json.RawMessage(a.usage.Raw)
	}
	u := a.usage
	m := map[string]int64{names[0]: u.Input, names[1]: u.Output}
	if names[2] != "" {
		m[names[2]], m[names[3]] = u.CacheRead, u.CacheWrite
	}
	if names[0] == "inputTokens" {
		m["totalTokens"] = u.Input + u.Output + u.CacheRead + u.CacheWrite
	}
	b, _ := json.Marshal(m)
	return b
}

var converseUsage = [4]string{"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheWriteInputTokens"}
var anthropicUsage = [4]string{"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}

// stream starts an event stream answer.
func (a *answer) stream(extra http.Header) {
	h := a.w.Header()
	h.Set("Content-Type", "application/vnd.amazon.eventstream")
	h.Set("X-Amzn-Requestid", "fake-stream-request")
	for k, v := range extra {
		h[k] = v
	}
	a.w.WriteHeader(http.StatusOK)
	a.enc = eventstream.NewEncoder()
}

// event writes one frame: an event of the given type, or, for a code, an
// exception. Streams that break on demand break after three frames.
func (a *answer) event(typ string, payload any) bool {
	if a.frames > 0 && a.delay > 0 {
		time.Sleep(a.delay)
	}
	a.frames++
	b, _ := json.Marshal(payload)
	msg := eventstream.Message{Payload: b, Headers: eventstream.Headers{
		{Name: ":message-type", Value: eventstream.StringValue("event")},
		{Name: ":event-type", Value: eventstream.StringValue(typ)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
	}}
	switch {
	case a.broken == "first" && a.frames == 1:
		msg = exception("throttlingException", "Too many tokens, please wait before trying again.")
	case a.broken == "exception" && a.frames == 4:
		msg = exception("modelStreamErrorException", "The model stopped.")
	case a.broken == "malformed" && a.frames == 4:
		_, _ = a.w.Write([]byte{0, 0, 0, 20, 0, 0, 0, 200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
		http.NewResponseController(a.w).Flush()
		return false
	}
	if err := a.enc.Encode(a.w, msg); err != nil {
		return false
	}
	_ = http.NewResponseController(a.w).Flush()
	return msg.Headers.Get(":message-type").String() == "event"
}

func exception(typ, msg string) eventstream.Message {
	b, _ := json.Marshal(map[string]string{"message": msg})
	return eventstream.Message{Payload: b, Headers: eventstream.Headers{
		{Name: ":message-type", Value: eventstream.StringValue("exception")},
		{Name: ":exception-type", Value: eventstream.StringValue(typ)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
	}}
}

func (a *answer) json(v any) {
	a.w.Header().Set("Content-Type", "application/json")
	a.w.Header().Set("X-Amzn-Requestid", "fake-request")
	a.w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(a.w).Encode(v)
}

// A Converse request as the fake reads it.
type converseIn struct {
	Messages []struct {
		Role    string `json:"role"`
		Content []struct {
			Text       *string         `json:"text"`
			Image      json.RawMessage `json:"image"`
			ToolUse    json.RawMessage `json:"toolUse"`
			ToolResult *struct {
				ToolUseID string `json:"toolUseId"`
				Content   []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"toolResult"`
		} `json:"content"`
	} `json:"messages"`
	ToolConfig *struct {
		Tools []struct {
			ToolSpec struct {
				Name string `json:"name"`
			} `json:"toolSpec"`
		} `json:"tools"`
	} `json:"toolConfig"`
}

// converse answers Converse and ConverseStream: a tool call when tools
// are offered and no tool result came back yet, what the tool said when
// one did, else a greeting that echoes the last user text.
func (a *answer) converse(body []byte, stream bool) {
	var in converseIn
	if err := json.Unmarshal(body, &in); err != nil || len(in.Messages) == 0 {
		writeError(a.w, http.StatusBadRequest, "ValidationException", "Malformed input request: messages are required")
		return
	}
	last := in.Messages[len(in.Messages)-1]
	var text, result, images string
	for _, c := range last.Content {
		switch {
		case c.Text != nil:
			text = *c.Text
		case c.ToolResult != nil && len(c.ToolResult.Content) > 0:
			result = c.ToolResult.Content[0].Text
		case c.Image != nil:
			images = " (and an image)"
		}
	}
	reply := "Hello from Bedrock! You said: " + text + images
	if result != "" {
		reply = "The tool said: " + result
	}
	callTool := in.ToolConfig != nil && len(in.ToolConfig.Tools) > 0 && result == ""
	toolName := ""
	if callTool {
		toolName = in.ToolConfig.Tools[0].ToolSpec.Name
	}
	if !stream {
		content := []any{map[string]any{"text": reply}}
		stop := "end_turn"
		if callTool {
			content = []any{map[string]any{"toolUse": map[string]any{"toolUseId": "tooluse_fake1", "name": toolName, "input": map[string]any{"city": "Paris"}}}}
			stop = "tool_use"
		}
		a.json(map[string]any{
			"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
			"stopReason": stop, "usage": a.usageJSON(converseUsage), "metrics": map[string]any{"latencyMs": 42},
		})
		return
	}
	a.stream(nil)
	ok := a.event("messageStart", map[string]any{"role": "assistant"})
	stop := "end_turn"
	if callTool {
		stop = "tool_use"
		ok = ok && a.event("contentBlockStart", map[string]any{"contentBlockIndex": 0,
			"start": map[string]any{"toolUse": map[string]any{"toolUseId": "tooluse_fake1", "name": toolName}}})
		for _, piece := range []string{`{"city":`, `"Paris"}`} {
			ok = ok && a.event("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"toolUse": map[string]any{"input": piece}}})
		}
	} else {
		for _, piece := range splitWords(reply, 3) {
			ok = ok && a.event("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": piece}})
		}
	}
	ok = ok && a.event("contentBlockStop", map[string]any{"contentBlockIndex": 0})
	ok = ok && a.event("messageStop", map[string]any{"stopReason": stop})
	_ = ok && a.event("metadata", map[string]any{"usage": a.usageJSON(converseUsage), "metrics": map[string]any{"latencyMs": 42}})
}

// splitWords cuts s into n pieces at spaces (fewer when it has fewer).
func splitWords(s string, n int) []string {
	words := strings.SplitAfter(s, " ")
	var out []string
	per := max(1, (len(words)+n-1)/n)
	for i := 0; i < len(words); i += per {
		out = append(out, strings.Join(words[i:min(i+per, len(words))], ""))
	}
	return out
}

// invoke answers InvokeModel and InvokeModelWithResponseStream: the
// Anthropic Messages body for Claude models, Titan's and Cohere's
// embedding bodies for theirs.
func (a *answer) invoke(body []byte, stream bool) {
	switch {
	case strings.Contains(a.model, "titan-embed"):
		var in struct {
			InputText  string `json:"inputText"`
			Dimensions int    `json:"dimensions"`
		}
		if json.Unmarshal(body, &in) != nil || in.InputText == "" {
			writeError(a.w, http.StatusBadRequest, "ValidationException", "Malformed input request: inputText is required")
			return
		}
		a.w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", fmt.Sprint(len(strings.Fields(in.InputText))))
		a.json(map[string]any{"embedding": Vector(in.InputText, max(in.Dimensions, 4)), "inputTextTokenCount": len(strings.Fields(in.InputText))})
		return
	case strings.Contains(a.model, "cohere.embed"):
		var in struct {
			Texts     []string `json:"texts"`
			InputType string   `json:"input_type"`
		}
		if json.Unmarshal(body, &in) != nil || len(in.Texts) == 0 || in.InputType == "" {
			writeError(a.w, http.StatusBadRequest, "ValidationException", "Malformed input request: texts and input_type are required")
			return
		}
		var vecs [][]float64
		words := 0
		for _, t := range in.Texts {
			vecs = append(vecs, Vector(t, 4))
			words += len(strings.Fields(t))
		}
		a.w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", fmt.Sprint(words))
		a.json(map[string]any{"id": "fake-cohere", "response_type": "embeddings_by_type", "texts": in.Texts, "embeddings": map[string]any{"float": vecs}})
		return
	}
	var in map[string]json.RawMessage
	if json.Unmarshal(body, &in) != nil {
		writeError(a.w, http.StatusBadRequest, "ValidationException", "Malformed input request")
		return
	}
	_, hasModel := in["model"]
	_, hasStream := in["stream"]
	if string(in["anthropic_version"]) != `"bedrock-2023-05-31"` || hasModel || hasStream || in["max_tokens"] == nil {
		writeError(a.w, http.StatusBadRequest, "ValidationException", "Malformed input request: #: extraneous key [model] is not permitted, anthropic_version must be bedrock-2023-05-31, max_tokens is required")
		return
	}
	reply := "Hello from Claude on Bedrock!"
	id := "msg_bdrk_fake1"
	if !stream {
		a.w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", fmt.Sprint(a.usage.Input))
		a.w.Header().Set("X-Amzn-Bedrock-Output-Token-Count", fmt.Sprint(a.usage.Output))
		a.json(map[string]any{"id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
			"content": []any{map[string]any{"type": "text", "text": reply}}, "stop_reason": "end_turn", "stop_sequence": nil,
			"usage": a.usageJSON(anthropicUsage)})
		return
	}
	a.stream(http.Header{"X-Amzn-Bedrock-Content-Type": {"application/json"}})
	chunk := func(ev map[string]any) bool {
		b, _ := json.Marshal(ev)
		return a.event("chunk", map[string]any{"bytes": b, "p": "abcdefgh"}) // bytes: base64 in JSON
	}
	var startUsage map[string]any
	_ = json.Unmarshal(a.usageJSON(anthropicUsage), &startUsage)
	ok := chunk(map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message", "role": "assistant",
		"model": "claude-sonnet-4-5-20250929", "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": startUsage["input_tokens"], "output_tokens": 1,
			"cache_read_input_tokens": startUsage["cache_read_input_tokens"], "cache_creation_input_tokens": startUsage["cache_creation_input_tokens"]}}})
	ok = ok && chunk(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for _, piece := range splitWords(reply, 3) {
		ok = ok && chunk(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": piece}})
	}
	ok = ok && chunk(map[string]any{"type": "content_block_stop", "index": 0})
	ok = ok && chunk(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": startUsage["output_tokens"]}})
	_ = ok && chunk(map[string]any{"type": "message_stop", "amazon-bedrock-invocationMetrics": map[string]any{
		"inputTokenCount": a.usage.Input, "outputTokenCount": a.usage.Output, "invocationLatency": 42, "firstByteLatency": 10}})
}

// Vector is the fake's embedding of a text: dims deterministic numbers.
func Vector(text string, dims int) []float64 {
	v := make([]float64, dims)
	for i := range v {
		v[i] = float64((len(text)+i*7)%13) / 13
	}
	return v
}
