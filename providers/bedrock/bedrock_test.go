package bedrock_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/bedrock"
	"github.com/tollgate/tollgate/providers/bedrock/bedrocktest"
	"github.com/tollgate/tollgate/providers/sse"
)

const (
	region = "eu-west-3"
	claude = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
)

func awsConfig(ctx context.Context) (aws.Config, error) {
	return aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider(bedrocktest.AccessKey, bedrocktest.SecretKey, "")}, nil
}

func newProvider(t *testing.T, f *bedrocktest.Fake, mod ...func(*bedrock.Config)) *bedrock.Provider {
	t.Helper()
	cfg := bedrock.Config{Name: "bedrock", Endpoint: f.URL, AWS: awsConfig}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := bedrock.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func serve(t *testing.T, p *bedrock.Provider, op providers.Op, model, body string) (*httptest.ResponseRecorder, providers.Result, error) {
	t.Helper()
	w := httptest.NewRecorder()
	res, err := p.Serve(context.Background(), w, &providers.Request{Op: op, Model: model, Body: []byte(body), Header: http.Header{}})
	return w, res, err
}

// A chat completion with a system prompt, an image, sampling options and
// tools is sent as Converse's body; the answer comes back as OpenAI's,
// with the usage (cache writes are input; reads apart).
func TestChatToConverse(t *testing.T) {
	f := bedrocktest.New(t, region)
	f.SetUsage(bedrocktest.Usage{Input: 90, CacheWrite: 10, CacheRead: 30, Output: 200})
	p := newProvider(t, f)
	img := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("png bytes"))
	w, res, err := serve(t, p, providers.OpChat, claude, `{"model":"x","messages":[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"`+img+`"}}]}],
		"max_tokens":1000,"temperature":0.2,"top_p":0.9,"stop":["END"]}`)
	if err != nil {
		t.Fatal(err)
	}
	req := f.Last()
	if req.Op != "converse" || req.Model != claude {
		t.Fatalf("called %s on %s", req.Op, req.Model)
	}
	var sent map[string]any
	_ = json.Unmarshal(req.Body, &sent)
	want := `{"inferenceConfig":{"maxTokens":1000,"stopSequences":["END"],"temperature":0.2,"topP":0.9},` +
		`"messages":[{"content":[{"text":"What is this?"},{"image":{"format":"png","source":{"bytes":"` + base64.StdEncoding.EncodeToString([]byte("png bytes")) + `"}}}],"role":"user"}],` +
		`"system":[{"text":"Be brief."}]}`
	if got, _ := json.Marshal(sent); string(got) != want {
		t.Fatalf("Converse body\n%s\nwant\n%s", got, want)
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("answer %s: %v", w.Body, err)
	}
	if !strings.Contains(out.Choices[0].Message.Content, "What is this? (and an image)") || out.Choices[0].FinishReason != "stop" ||
		out.Usage.PromptTokens != 130 || out.Usage.CompletionTokens != 200 || out.Usage.PromptTokensDetails.CachedTokens != 30 {
		t.Fatalf("answer %s", w.Body)
	}
	u := res.Usage
	if u.InputTokens != 100 || u.CacheWriteInputTokens != 10 || u.CachedInputTokens != 30 || u.CachedInInput || u.OutputTokens != 200 || !u.Reported {
		t.Fatalf("usage %+v", u)
	}
}

// Tools: the model's call comes back as tool_calls, and the tool's result
// is sent as a toolResult block after the assistant's toolUse.
func TestChatToolsRoundTrip(t *testing.T) {
	f := bedrocktest.New(t, region)
	p := newProvider(t, f)
	tools := `"tools":[{"type":"function","function":{"name":"weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"tool_choice":"required"`
	w, _, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Weather in Paris?"}],`+tools+`}`)
	if err != nil {
		t.Fatal(err)
	}
	var first struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &first)
	if len(first.Choices) != 1 || first.Choices[0].FinishReason != "tool_calls" || len(first.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("first answer %s", w.Body)
	}
	call := first.Choices[0].Message.ToolCalls[0]
	if call.Function.Name != "weather" || call.Function.Arguments != `{"city":"Paris"}` {
		t.Fatalf("tool call %+v", call)
	}
	var sent struct {
		ToolConfig struct {
			Tools []struct {
				ToolSpec struct {
					Name        string          `json:"name"`
					InputSchema json.RawMessage `json:"inputSchema"`
				} `json:"toolSpec"`
			} `json:"tools"`
			ToolChoice map[string]any `json:"toolChoice"`
		} `json:"toolConfig"`
	}
	_ = json.Unmarshal(f.Last().Body, &sent)
	if len(sent.ToolConfig.Tools) != 1 || !strings.Contains(string(sent.ToolConfig.Tools[0].ToolSpec.InputSchema), `"json":{"type":"object"`) ||
		sent.ToolConfig.ToolChoice["any"] == nil {
		t.Fatalf("tool config sent %s", f.Last().Body)
	}
	w, _, err = serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"`+call.ID+`","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"`+call.ID+`","content":"18°C and sunny"}],`+tools+`}`)
	if err != nil || !strings.Contains(w.Body.String(), "The tool said: 18°C and sunny") {
		t.Fatalf("second answer %s %v", w.Body, err)
	}
	var hist struct {
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(f.Last().Body, &hist)
	if len(hist.Messages) != 3 || hist.Messages[1].Role != "assistant" || hist.Messages[1].Content[0]["toolUse"] == nil ||
		hist.Messages[2].Role != "user" || hist.Messages[2].Content[0]["toolResult"] == nil {
		t.Fatalf("history sent %s", f.Last().Body)
	}
}

// chunks reads an OpenAI chat stream's data lines.
func chunks(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// A stream: ConverseStream's events become chat chunks, the usage chunk
// when asked for, then [DONE]; tool calls stream as OpenAI's deltas.
func TestChatStream(t *testing.T) {
	f := bedrocktest.New(t, region)
	p := newProvider(t, f)
	w, res, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if err != nil {
		t.Fatal(err)
	}
	cs := chunks(t, w.Body.String())
	if f.Last().Op != "converse-stream" || len(cs) < 5 || cs[len(cs)-1] != "[DONE]" {
		t.Fatalf("stream %q", cs)
	}
	var text strings.Builder
	var finish string
	var usage struct {
		PromptTokens, CompletionTokens int64
	}
	for _, c := range cs[:len(cs)-1] {
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(c), &ch); err != nil {
			t.Fatal(err)
		}
		for _, choice := range ch.Choices {
			text.WriteString(choice.Delta.Content)
			if choice.FinishReason != nil {
				finish = *choice.FinishReason
			}
		}
		if ch.Usage != nil {
			usage.PromptTokens, usage.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
		}
	}
	if text.String() != "Hello from Bedrock! You said: Hi" || finish != "stop" || usage.PromptTokens != 100 || usage.CompletionTokens != 200 {
		t.Fatalf("stream text %q finish %q usage %+v", text.String(), finish, usage)
	}
	if !res.Usage.Reported || res.Usage.InputTokens != 100 || res.Usage.OutputTokens != 200 {
		t.Fatalf("usage %+v", res.Usage)
	}
	w, _, _ = serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}],"stream":true,
		"tools":[{"type":"function","function":{"name":"weather"}}]}`)
	body := w.Body.String()
	if !strings.Contains(body, `"tool_calls":[{"index":0,"id":"tooluse_fake1","type":"function","function":{"name":"weather","arguments":""}}]`) ||
		!strings.Contains(body, `"arguments":"{\"city\":"`) || !strings.Contains(body, `"finish_reason":"tool_calls"`) || strings.Contains(body, `"usage"`) {
		t.Fatalf("tool stream %s", body)
	}
}

// Anthropic Messages go to InvokeModel with Bedrock's body: the model in
// the URL, not the body, no stream member, anthropic_version
// bedrock-2023-05-31, anthropic-beta as anthropic_beta.
func TestMessagesToInvokeModel(t *testing.T) {
	f := bedrocktest.New(t, region)
	f.SetUsage(bedrocktest.Usage{Input: 12, Output: 18, CacheRead: 4, CacheWrite: 3})
	p := newProvider(t, f)
	w := httptest.NewRecorder()
	res, err := p.Serve(context.Background(), w, &providers.Request{Op: providers.OpMessages, Model: claude,
		Header: http.Header{"Anthropic-Beta": {"context-1m-2025-08-07"}},
		Body:   []byte(`{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"Hello"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	req := f.Last()
	var sent map[string]json.RawMessage
	_ = json.Unmarshal(req.Body, &sent)
	if req.Op != "invoke" || sent["model"] != nil || string(sent["anthropic_version"]) != `"bedrock-2023-05-31"` ||
		string(sent["anthropic_beta"]) != `["context-1m-2025-08-07"]` || string(sent["max_tokens"]) != "256" {
		t.Fatalf("sent %s to %s", req.Body, req.Op)
	}
	if !strings.Contains(w.Body.String(), "Hello from Claude on Bedrock!") || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("answer %s", w.Body)
	}
	if u := res.Usage; u.InputTokens != 15 || u.CacheWriteInputTokens != 3 || u.CachedInputTokens != 4 || u.OutputTokens != 18 || !u.Reported {
		t.Fatalf("usage %+v", u)
	}

	w, res, err = serve(t, p, providers.OpMessages, claude, `{"model":"x","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if f.Last().Op != "invoke-with-response-stream" || w.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("streamed through %s as %s", f.Last().Op, w.Header().Get("Content-Type"))
	}
	rd := sse.NewReader(strings.NewReader(w.Body.String()))
	var names []string
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		names = append(names, ev.Name)
	}
	if got := strings.Join(names, ","); got != "message_start,content_block_start,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop" {
		t.Fatalf("events %s", got)
	}
	if u := res.Usage; u.InputTokens != 15 || u.OutputTokens != 18 || !u.Reported {
		t.Fatalf("stream usage %+v", u)
	}
}

func floats32(t *testing.T, s string) []float64 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

// Embeddings: Titan takes one text a call, Cohere a batch; both answer in
// OpenAI's shape, base64 when asked.
func TestEmbeddings(t *testing.T) {
	f := bedrocktest.New(t, region)
	p := newProvider(t, f)
	for _, model := range []string{"amazon.titan-embed-text-v2:0", "cohere.embed-english-v3"} {
		w, res, err := serve(t, p, providers.OpEmbeddings, model, `{"model":"x","input":["one two","three four five"],"encoding_format":"base64"}`)
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		var out struct {
			Data []struct {
				Index     int    `json:"index"`
				Embedding string `json:"embedding"`
			} `json:"data"`
			Usage struct {
				PromptTokens int64 `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || len(out.Data) != 2 {
			t.Fatalf("%s: %s", model, w.Body)
		}
		for i, text := range []string{"one two", "three four five"} {
			got, want := floats32(t, out.Data[i].Embedding), bedrocktest.Vector(text, 4)
			for j := range want {
				if math.Abs(got[j]-want[j]) > 1e-6 || out.Data[i].Index != i {
					t.Fatalf("%s: vector %d %v, want %v", model, i, got, want)
				}
			}
		}
		if out.Usage.PromptTokens != 5 || res.Usage.InputTokens != 5 || res.Usage.OutputTokens != 0 {
			t.Fatalf("%s: usage %+v / %+v", model, out.Usage, res.Usage)
		}
	}
	if n := f.Calls("amazon.titan-embed-text-v2:0"); n != 2 {
		t.Fatalf("Titan called %d times for two texts", n)
	}
	if _, _, err := serve(t, p, providers.OpEmbeddings, claude, `{"input":"x"}`); !errors.Is(err, providers.ErrUnsupported) {
		t.Fatalf("embeddings from a chat model: %v", err)
	}
}

// Bedrock's errors: throttling and quota errors are 429s (the gateway
// fails over and cools down), a model not ready and 5xx fail over, a
// validation error is the client's 400, access denied 403.
func TestErrors(t *testing.T) {
	f := bedrocktest.New(t, region)
	p := newProvider(t, f)
	f.Throttle(claude, 1)
	_, _, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}]}`)
	var pe *providers.Error
	if !errors.As(err, &pe) || !pe.RateLimited() || !pe.Retryable() || !strings.Contains(string(pe.Body), "ThrottlingException") {
		t.Fatalf("throttled: %v", err)
	}
	if n := f.Calls(claude); n != 1 {
		t.Fatalf("a throttled call was tried %d times; a 429 comes back at once", n)
	}
	_, _, err = serve(t, p, providers.OpMessages, claude, `{"messages":[{"role":"user","content":"Hi"}]}`) // no max_tokens
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Retryable() || !strings.Contains(string(pe.Body), "ValidationException") {
		t.Fatalf("validation: %v", err)
	}
	// A stream refused in its first frame is an error before any byte.
	f.Break(claude, "first")
	w, _, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}],"stream":true}`)
	if !errors.As(err, &pe) || !pe.RateLimited() || w.Body.Len() != 0 {
		t.Fatalf("a stream throttled in its first frame: %v, wrote %q", err, w.Body)
	}
	w, _, err = serve(t, p, providers.OpMessages, claude, `{"max_tokens":5,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`)
	if !errors.As(err, &pe) || !pe.RateLimited() || w.Body.Len() != 0 {
		t.Fatalf("a Messages stream throttled in its first frame: %v, wrote %q", err, w.Body)
	}
	for _, tc := range []struct{ code string }{{"ServiceQuotaExceededException"}, {"ModelNotReadyException"}, {"AccessDeniedException"}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Amzn-Errortype", tc.code+":http://internal.amazon.com/coral/com.amazon.bedrock/")
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"message":"no"}`))
		}))
		q := newProvider(t, f, func(c *bedrock.Config) { c.Endpoint = srv.URL })
		_, _, err := serve(t, q, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}]}`)
		srv.Close()
		want := map[string]int{"ServiceQuotaExceededException": 429, "ModelNotReadyException": 503, "AccessDeniedException": 403}[tc.code]
		if !errors.As(err, &pe) || pe.Status != want {
			t.Errorf("%s: %v, want status %d", tc.code, err, want)
		}
	}
}

// A stream that breaks after it began ends with the protocol's error
// event, its usage not reported; a malformed frame is an upstream error,
// never a panic.
func TestBrokenStreams(t *testing.T) {
	for _, how := range []string{"exception", "malformed"} {
		f := bedrocktest.New(t, region)
		p := newProvider(t, f)
		f.Break(claude, how)
		w, res, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi there you"}],"stream":true}`)
		if err != nil || !strings.Contains(w.Body.String(), `"error"`) || strings.Contains(w.Body.String(), "[DONE]") || res.Usage.Reported {
			t.Fatalf("%s chat stream: %v %s %+v", how, err, w.Body, res.Usage)
		}
		w, res, err = serve(t, p, providers.OpMessages, claude, `{"max_tokens":5,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`)
		if err != nil || !strings.Contains(w.Body.String(), "event: error") || strings.Contains(w.Body.String(), "message_stop") || res.Usage.Reported {
			t.Fatalf("%s messages stream: %v %s %+v", how, err, w.Body, res.Usage)
		}
	}
}

// Usage numbers from upstream are input: negative, fractional, absurd or
// not numbers at all, they are clamped, and the answer still served.
func TestHostileUsageClamps(t *testing.T) {
	f := bedrocktest.New(t, region)
	p := newProvider(t, f)
	f.SetUsage(bedrocktest.Usage{Raw: `{"inputTokens":1e300,"outputTokens":-5,"cacheReadInputTokens":"many","cacheWriteInputTokens":99999999999999999999999}`})
	_, res, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if u := res.Usage; u.InputTokens != 2*math.MaxInt32 || u.OutputTokens != 0 || u.CachedInputTokens != 0 || u.CacheWriteInputTokens != math.MaxInt32 {
		t.Fatalf("usage %+v", u)
	}
	_, res, err = serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}],"stream":true}`)
	if err != nil || res.Usage.InputTokens != 2*math.MaxInt32 || res.Usage.OutputTokens < 0 {
		t.Fatalf("stream usage %+v %v", res.Usage, err)
	}
}

// The client is built on the first call, not before: a process that never
// calls Bedrock loads no AWS configuration; a failed load is tried again.
func TestSessionIsLazy(t *testing.T) {
	f := bedrocktest.New(t, region)
	var loads atomic.Int64
	p := newProvider(t, f, func(c *bedrock.Config) {
		c.AWS = func(ctx context.Context) (aws.Config, error) {
			if loads.Add(1) == 1 {
				return aws.Config{}, errors.New("no credentials yet")
			}
			return awsConfig(ctx)
		}
	})
	if loads.Load() != 0 {
		t.Fatal("New loaded the AWS configuration")
	}
	if _, _, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}]}`); err == nil {
		t.Fatal("a failed load served")
	}
	for range 2 {
		if _, _, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}]}`); err != nil {
			t.Fatal(err)
		}
	}
	if loads.Load() != 2 {
		t.Fatalf("loaded %d times, want 2 (one failure, one kept)", loads.Load())
	}
}

// The fake refuses what is not signed for bedrock in its region.
func TestFakeRefusesUnsigned(t *testing.T) {
	f := bedrocktest.New(t, region)
	p := newProvider(t, f, func(c *bedrock.Config) { c.Region = "us-east-1" })
	_, _, err := serve(t, p, providers.OpChat, claude, `{"messages":[{"role":"user","content":"Hi"}]}`)
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Status != 403 {
		t.Fatalf("signed for another region: %v", err)
	}
	resp, err := http.Post(f.URL+"/model/x/converse", "application/json", strings.NewReader(`{}`))
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("unsigned: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestBurndown(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  int64
	}{
		{"anthropic.claude-3-7-sonnet-20250219-v1:0", 5},
		{"us.anthropic.claude-sonnet-4-20250514-v1:0", 5},
		{"global.anthropic.claude-sonnet-4-5-20250929-v1:0", 5},
		{"eu.anthropic.claude-opus-4-1-20250805-v1:0", 5},
		{"anthropic.claude-haiku-4-5-20251001-v1:0", 5},
		{"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-opus-4-20250514-v1:0", 5},
		{"anthropic.claude-3-5-sonnet-20241022-v2:0", 1},
		{"us.anthropic.claude-3-haiku-20240307-v1:0", 1},
		{"amazon.nova-pro-v1:0", 1},
		{"meta.llama3-70b-instruct-v1:0", 1},
	} {
		if got := bedrock.Burndown(tc.model, nil); got != tc.want {
			t.Errorf("Burndown(%s) = %d, want %d", tc.model, got, tc.want)
		}
	}
	over := map[string]int64{"anthropic.claude-3-5-sonnet": 2, "us.anthropic.claude-3-5-sonnet-20241022-v2:0": 3, "amazon.nova": 4}
	for model, want := range map[string]int64{
		"anthropic.claude-3-5-sonnet-20240620-v1:0":    2,
		"us.anthropic.claude-3-5-sonnet-20241022-v2:0": 3, // the longest prefix
		"amazon.nova-lite-v1:0":                        4,
		"anthropic.claude-sonnet-4-5":                  5,
	} {
		if got := bedrock.Burndown(model, over); got != want {
			t.Errorf("Burndown(%s, overrides) = %d, want %d", model, got, want)
		}
	}
	if _, err := bedrock.New(bedrock.Config{Name: "b", Burndown: map[string]int64{"x": 0}}); err == nil {
		t.Error("a burndown of 0 was accepted")
	}
}

// A class mapped to a service tier asks for it: in Converse's body, and in
// InvokeModel's header.
func TestServiceTier(t *testing.T) {
	f := bedrocktest.New(t, region)
	p := newProvider(t, f, func(c *bedrock.Config) {
		c.ServiceTiers = map[string]string{"batch": "flex", "interactive": "priority"}
	})
	for _, tc := range []struct {
		class, want string
	}{{"batch", "flex"}, {"interactive", "priority"}, {"standard", ""}} {
		w := httptest.NewRecorder()
		if _, err := p.Serve(context.Background(), w, &providers.Request{Op: providers.OpChat, Model: claude, Class: tc.class, Header: http.Header{},
			Body: []byte(`{"messages":[{"role":"user","content":"Hi"}]}`)}); err != nil {
			t.Fatal(err)
		}
		var sent struct {
			ServiceTier *struct {
				Type string `json:"type"`
			} `json:"serviceTier"`
		}
		_ = json.Unmarshal(f.Last().Body, &sent)
		if (tc.want == "") != (sent.ServiceTier == nil) || (sent.ServiceTier != nil && sent.ServiceTier.Type != tc.want) {
			t.Errorf("class %s sent %s", tc.class, f.Last().Body)
		}
		if _, err := p.Serve(context.Background(), httptest.NewRecorder(), &providers.Request{Op: providers.OpMessages, Model: claude, Class: tc.class,
			Header: http.Header{}, Body: []byte(`{"max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`)}); err != nil {
			t.Fatal(err)
		}
		if got := f.Last().Header.Get("X-Amzn-Bedrock-Service-Tier"); got != tc.want {
			t.Errorf("class %s: InvokeModel's tier header %q", tc.class, got)
		}
	}
	if _, err := bedrock.New(bedrock.Config{Name: "b", ServiceTiers: map[string]string{"batch": "cheap"}}); err == nil {
		t.Error("an unknown tier was accepted")
	}
}
