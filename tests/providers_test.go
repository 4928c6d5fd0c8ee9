package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	anthropicp "github.com/tollgate/tollgate/providers/anthropic"
	geminip "github.com/tollgate/tollgate/providers/gemini"
	openaip "github.com/tollgate/tollgate/providers/openai"
)

func openAIClient(g *sdkGateway) openai.Client {
	return openai.NewClient(option.WithBaseURL(g.URL+"/v1/"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
}

func anthropicClient(g *sdkGateway) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(g.URL+"/"), aoption.WithAPIKey("sk-client"), aoption.WithMaxRetries(0))
}

func wantUsage(t *testing.T, got limiter.Usage, in, out, cached int64) {
	t.Helper()
	if got.InputTokens != in || got.OutputTokens != out || got.CachedInputTokens != cached || !got.Exact {
		t.Errorf("recorded usage %+v, want in %d out %d cached %d, exact", got, in, out, cached)
	}
}

func userMessage(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "gpt-4o",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		MaxTokens: openai.Int(64),
	}
}

// OpenAI: chat, chat streams (asking for usage or not), Responses API
// (plain and streamed) and embeddings, through openai-go.
func TestOpenAIProvider(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, nil)
	p, err := openaip.New(openaip.Config{Name: "openai", BaseURL: up.URL + "/v1", APIKey: "sk-upstream"})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil)
	c := openAIClient(g)

	up.serve = replay(t, "openai_chat.json", 200)
	resp, err := c.Chat.Completions.New(ctx, userMessage("Hello"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "Hello! How can I assist you today?" || resp.Usage.TotalTokens != 29 {
		t.Fatalf("SDK parsed %+v", resp)
	}
	req := up.last(t)
	if req.Path != "/v1/chat/completions" || req.Header.Get("Authorization") != "Bearer sk-upstream" {
		t.Fatalf("upstream got %s with %q", req.Path, req.Header.Get("Authorization"))
	}
	wantUsage(t, g.lastUsage(t, 1), 19, 10, 0)

	// A stream: the gateway asks for the usage chunk and, since the client
	// did not, keeps it from the client.
	up.serve = replaySSE(t, "openai_chat_stream.sse", 0)
	stream := c.Chat.Completions.NewStreaming(ctx, userMessage("Hello"))
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != "Hello! How can I help?" || acc.Usage.TotalTokens != 0 || chunks != 9 {
		t.Fatalf("stream: content %q, usage %+v, %d chunks", got, acc.Usage, chunks)
	}
	var sent struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(up.last(t).Body, &sent)
	if !sent.StreamOptions.IncludeUsage {
		t.Fatal("the gateway did not ask the upstream for stream usage")
	}
	wantUsage(t, g.lastUsage(t, 2), 12, 8, 0)

	// Asked for, the usage chunk reaches the client.
	params := userMessage("Hello")
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream = c.Chat.Completions.NewStreaming(ctx, params)
	acc = openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if acc.Usage.TotalTokens != 20 {
		t.Fatalf("client asked for usage and got %+v", acc.Usage)
	}
	wantUsage(t, g.lastUsage(t, 3), 12, 8, 0)

	up.serve = replay(t, "openai_responses.json", 200)
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4.1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a story")},
	})
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "responses", r.OutputText(), "unicorn named Lumina")
	if up.last(t).Path != "/v1/responses" {
		t.Fatalf("responses went to %s", up.last(t).Path)
	}
	wantUsage(t, g.lastUsage(t, 4), 36, 87, 0)

	up.serve = replaySSE(t, "openai_responses_stream.sse", 0)
	rs := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "gpt-4.1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi")},
	})
	var text strings.Builder
	for rs.Next() {
		if ev := rs.Current(); ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	if rs.Err() != nil || text.String() != "Hi there!" {
		t.Fatalf("responses stream %q %v", text.String(), rs.Err())
	}
	wantUsage(t, g.lastUsage(t, 5), 14, 4, 0)

	up.serve = replay(t, "openai_embeddings.json", 200)
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "text-embedding-3-small",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"hello", "world"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Data) != 2 || emb.Usage.PromptTokens != 8 {
		t.Fatalf("embeddings %+v", emb)
	}
	wantUsage(t, g.lastUsage(t, 6), 8, 0, 0)
}

// Azure OpenAI: deployment URLs, api-version, the api-key header.
func TestAzureProvider(t *testing.T) {
	up := newUpstream(t, replay(t, "azure_chat.json", 200))
	p, err := openaip.New(openaip.Config{Name: "azure-eu", BaseURL: up.URL, APIKey: "az-key",
		Azure: &openaip.Azure{APIVersion: "2024-10-21", Deployments: map[string]string{"gpt-4o": "prod-gpt4o"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil)
	c := openAIClient(g)
	params := userMessage("Hello")
	params.Model = "azure-eu/gpt-4o"
	resp, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "Azure says hello." {
		t.Fatalf("SDK parsed %+v", resp.Choices)
	}
	req := up.last(t)
	if req.Path != "/openai/deployments/prod-gpt4o/chat/completions" || req.RawQuery != "api-version=2024-10-21" ||
		req.Header.Get("Api-Key") != "az-key" || req.Header.Get("Authorization") != "" {
		t.Fatalf("upstream got %s?%s api-key %q authorization %q", req.Path, req.RawQuery, req.Header.Get("Api-Key"), req.Header.Get("Authorization"))
	}
	wantUsage(t, g.lastUsage(t, 1), 21, 5, 0)
}

// An OpenAI-compatible server (vLLM's answers): model ids with '/' and
// its own usage chunk.
func TestCompatibleProvider(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, replay(t, "vllm_chat.json", 200))
	p, err := openaip.New(openaip.Config{Name: "vllm", BaseURL: up.URL + "/v1", Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil)
	c := openAIClient(g)
	params := userMessage("Hello")
	params.Model = "meta-llama/Llama-3.1-8B-Instruct"
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "Hello from vLLM." {
		t.Fatalf("SDK parsed %+v", resp.Choices)
	}
	if h := up.last(t).Header.Get("Authorization"); h != "" {
		t.Fatalf("a keyless server was sent Authorization %q", h)
	}
	wantUsage(t, g.lastUsage(t, 1), 42, 6, 0)

	up.serve = replaySSE(t, "vllm_chat_stream.sse", 0)
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if stream.Err() != nil || acc.Choices[0].Message.Content != "Hello from vLLM." {
		t.Fatalf("stream %q %v", acc.Choices[0].Message.Content, stream.Err())
	}
	wantUsage(t, g.lastUsage(t, 2), 42, 5, 0)
}

// Anthropic: native Messages through anthropic-sdk-go, and chat
// completions translated to Messages and back through openai-go.
func TestAnthropicProvider(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, replay(t, "anthropic_messages.json", 200))
	p, err := anthropicp.New(anthropicp.Config{Name: "anthropic", BaseURL: up.URL, APIKey: "sk-ant-upstream"})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil)
	ac := anthropicClient(g)
	params := anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-20250514",
		MaxTokens: 256,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))},
	}
	msg, err := ac.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != "Hello! It's nice to meet you. How can I help you today?" || msg.Usage.OutputTokens != 18 {
		t.Fatalf("SDK parsed %+v", msg)
	}
	req := up.last(t)
	if req.Path != "/v1/messages" || req.Header.Get("X-Api-Key") != "sk-ant-upstream" || req.Header.Get("Anthropic-Version") == "" {
		t.Fatalf("upstream got %s x-api-key %q version %q", req.Path, req.Header.Get("X-Api-Key"), req.Header.Get("Anthropic-Version"))
	}
	// Cache reads are recorded apart and are not input for the limits.
	wantUsage(t, g.lastUsage(t, 1), 12, 18, 4)

	up.serve = replaySSE(t, "anthropic_messages_stream.sse", 0)
	stream := ac.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if stream.Err() != nil || acc.Content[0].Text != "Hello! How can I help?" || acc.Usage.OutputTokens != 9 {
		t.Fatalf("stream %+v %v", acc, stream.Err())
	}
	wantUsage(t, g.lastUsage(t, 2), 25, 9, 0)

	// Chat completions, translated.
	oc := openAIClient(g)
	up.serve = replay(t, "anthropic_messages.json", 200)
	chatParams := userMessage("Hello")
	chatParams.Model = "anthropic/claude-sonnet-4-20250514"
	chatParams.Messages = append([]openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief.")}, chatParams.Messages...)
	resp, err := oc.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "Hello! It's nice to meet you. How can I help you today?" ||
		resp.Choices[0].FinishReason != "stop" || resp.Usage.PromptTokens != 16 || resp.Usage.PromptTokensDetails.CachedTokens != 4 {
		t.Fatalf("translated answer %+v", resp)
	}
	var sent struct {
		Model     string `json:"model"`
		System    string `json:"system"`
		MaxTokens int64  `json:"max_tokens"`
		Messages  []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(up.last(t).Body, &sent)
	if sent.Model != "claude-sonnet-4-20250514" || sent.System != "Be brief." || sent.MaxTokens != 64 || len(sent.Messages) != 1 {
		t.Fatalf("translated request %+v", sent)
	}
	wantUsage(t, g.lastUsage(t, 3), 12, 18, 4)

	up.serve = replaySSE(t, "anthropic_messages_stream.sse", 0)
	chatParams.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	cs := oc.Chat.Completions.NewStreaming(ctx, chatParams)
	cacc := openai.ChatCompletionAccumulator{}
	for cs.Next() {
		cacc.AddChunk(cs.Current())
	}
	if cs.Err() != nil || cacc.Choices[0].Message.Content != "Hello! How can I help?" || cacc.Usage.CompletionTokens != 9 ||
		cacc.Choices[0].FinishReason != "stop" {
		t.Fatalf("translated stream %+v %v", cacc.ChatCompletion, cs.Err())
	}
	wantUsage(t, g.lastUsage(t, 4), 25, 9, 0)
}

// Gemini: chat completions translated to generateContent (plain and
// streamed) through openai-go, and the native route.
func TestGeminiProvider(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, replay(t, "gemini_generate.json", 200))
	p, err := geminip.New(geminip.Config{Name: "gemini", BaseURL: up.URL, APIKey: "g-key"})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil)
	oc := openAIClient(g)
	params := userMessage("Hello")
	params.Model = "gemini/gemini-2.0-flash"
	resp, err := oc.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "Hello there! How can I help you today?" || resp.Usage.TotalTokens != 15 {
		t.Fatalf("translated answer %+v", resp)
	}
	req := up.last(t)
	if req.Path != "/v1beta/models/gemini-2.0-flash:generateContent" || req.Header.Get("X-Goog-Api-Key") != "g-key" {
		t.Fatalf("upstream got %s key %q", req.Path, req.Header.Get("X-Goog-Api-Key"))
	}
	wantUsage(t, g.lastUsage(t, 1), 5, 10, 0)

	up.serve = replaySSE(t, "gemini_generate_stream.sse", 0)
	cs := oc.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for cs.Next() {
		acc.AddChunk(cs.Current())
	}
	if cs.Err() != nil || acc.Choices[0].Message.Content != "Hello from Gemini!" || acc.Choices[0].FinishReason != "stop" {
		t.Fatalf("translated stream %+v %v", acc.ChatCompletion, cs.Err())
	}
	if q := up.last(t).RawQuery; q != "alt=sse" {
		t.Fatalf("stream query %q", q)
	}
	wantUsage(t, g.lastUsage(t, 2), 7, 4, 0)

	// The native route, as Google's clients call it.
	up.serve = replay(t, "gemini_generate.json", 200)
	hr, err := http.NewRequest("POST", g.URL+"/v1beta/models/gemini-2.0-flash:generateContent",
		strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"Hello"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-Goog-Api-Key", "client-key")
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "Hello there!") {
		t.Fatalf("native route: %d %s", res.StatusCode, body)
	}
	wantUsage(t, g.lastUsage(t, 3), 5, 10, 0)
}

// The built-in mock, through both SDKs: its usage is min(max_tokens, 16)
// output tokens and the gateway's own estimate of the prompt.
func TestMockProviderWithSDKs(t *testing.T) {
	ctx := context.Background()
	g := newSDKGateway(t, []providers.Provider{newCountingMock("mock")}, nil)
	oc := openAIClient(g)
	params := userMessage("Hello there")
	params.MaxTokens = openai.Int(5)
	resp, err := oc.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 5 || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("mock chat %+v", resp)
	}
	u := g.lastUsage(t, 1)
	if u.OutputTokens != 5 || u.InputTokens != resp.Usage.PromptTokens || !u.Exact {
		t.Fatalf("recorded %+v, answer %+v", u, resp.Usage)
	}
	ac := anthropicClient(g)
	stream := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
		Model: "claude-mock", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))},
	})
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if stream.Err() != nil || acc.Usage.OutputTokens != 16 || !strings.HasPrefix(acc.Content[0].Text, "tollgate mock answer") {
		t.Fatalf("mock messages stream %+v %v", acc, stream.Err())
	}
	if u := g.lastUsage(t, 2); u.OutputTokens != 16 || !u.Exact {
		t.Fatalf("recorded %+v", u)
	}
}
