package bedrock_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/bedrock/bedrocktest"
)

// The SDK's own bedrockruntime client is the oracle of the wire format:
// it reads the fake's answers and streams, and what the adapter sends is
// what it sends.

func officialClient(f *bedrocktest.Fake) *bedrockruntime.Client {
	return bedrockruntime.New(bedrockruntime.Options{
		Region:           region,
		Credentials:      credentials.NewStaticCredentialsProvider(bedrocktest.AccessKey, bedrocktest.SecretKey, ""),
		BaseEndpoint:     aws.String(f.URL),
		RetryMaxAttempts: 1, // a throttled call comes back at once
	})
}

// The fake speaks Bedrock's formats: the official client decodes its
// Converse answers, ConverseStream events, InvokeModel bodies and
// InvokeModelWithResponseStream chunks, and its throttling as the SDK's
// ThrottlingException after one attempt.
func TestOfficialClientReadsTheFake(t *testing.T) {
	ctx := context.Background()
	f := bedrocktest.New(t, region)
	c := officialClient(f)
	user := []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "Hi"}}}}
	out, err := c.Converse(ctx, &bedrockruntime.ConverseInput{ModelId: aws.String(claude), Messages: user})
	if err != nil {
		t.Fatal(err)
	}
	msg := out.Output.(*types.ConverseOutputMemberMessage).Value
	if txt := msg.Content[0].(*types.ContentBlockMemberText).Value; txt != "Hello from Bedrock! You said: Hi" || *out.Usage.OutputTokens != 200 {
		t.Fatalf("Converse: %q %+v", txt, out.Usage)
	}
	st, err := c.ConverseStream(ctx, &bedrockruntime.ConverseStreamInput{ModelId: aws.String(claude), Messages: user})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var usage *types.TokenUsage
	for ev := range st.GetStream().Events() {
		switch e := ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			text.WriteString(e.Value.Delta.(*types.ContentBlockDeltaMemberText).Value)
		case *types.ConverseStreamOutputMemberMetadata:
			usage = e.Value.Usage
		}
	}
	if err := st.GetStream().Err(); err != nil || text.String() != "Hello from Bedrock! You said: Hi" || usage == nil || *usage.InputTokens != 100 {
		t.Fatalf("ConverseStream: %q %+v %v", text.String(), usage, err)
	}
	body := []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`)
	inv, err := c.InvokeModel(ctx, &bedrockruntime.InvokeModelInput{ModelId: aws.String(claude), Body: body, ContentType: aws.String("application/json")})
	if err != nil || !strings.Contains(string(inv.Body), "Hello from Claude on Bedrock!") {
		t.Fatalf("InvokeModel: %s %v", inv.Body, err)
	}
	ist, err := c.InvokeModelWithResponseStream(ctx, &bedrockruntime.InvokeModelWithResponseStreamInput{ModelId: aws.String(claude), Body: body,
		ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatal(err)
	}
	var types_ []string
	for ev := range ist.GetStream().Events() {
		if ch, ok := ev.(*types.ResponseStreamMemberChunk); ok {
			var e struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(ch.Value.Bytes, &e)
			types_ = append(types_, e.Type)
		}
	}
	if err := ist.GetStream().Err(); err != nil || len(types_) != 8 || types_[0] != "message_start" || types_[7] != "message_stop" {
		t.Fatalf("InvokeModelWithResponseStream: %v %v", types_, err)
	}
	f.Throttle(claude, 1)
	before := f.Calls(claude)
	_, err = c.Converse(ctx, &bedrockruntime.ConverseInput{ModelId: aws.String(claude), Messages: user})
	var te *types.ThrottlingException
	if !errors.As(err, &te) || f.Calls(claude) != before+1 {
		t.Fatalf("throttled: %v after %d calls", err, f.Calls(claude)-before)
	}
}

// The adapter's Converse body for a chat request with a system prompt,
// an image, sampling options, a tool call and its result is the very body
// the official client sends for the same conversation; and both reach the
// same path, signed alike.
func TestConverseBodyAsTheOfficialClientSendsIt(t *testing.T) {
	ctx := context.Background()
	f := bedrocktest.New(t, region)
	schema := map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}
	png := []byte("png bytes")
	_, err := officialClient(f).Converse(ctx, &bedrockruntime.ConverseInput{
		ModelId: aws.String(claude),
		System:  []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "Be brief."}},
		Messages: []types.Message{
			{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
				&types.ContentBlockMemberText{Value: "What is this?"},
				&types.ContentBlockMemberImage{Value: types.ImageBlock{Format: types.ImageFormatPng, Source: &types.ImageSourceMemberBytes{Value: png}}},
			}},
			{Role: types.ConversationRoleAssistant, Content: []types.ContentBlock{
				&types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{ToolUseId: aws.String("t1"), Name: aws.String("weather"),
					Input: document.NewLazyDocument(map[string]any{"city": "Paris"})}},
			}},
			{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
				&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{ToolUseId: aws.String("t1"),
					Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "18C"}}}},
			}},
		},
		InferenceConfig: &types.InferenceConfiguration{MaxTokens: aws.Int32(100), Temperature: aws.Float32(0.5), TopP: aws.Float32(0.25), StopSequences: []string{"END"}},
		ToolConfig: &types.ToolConfiguration{
			Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String("weather"), Description: aws.String("Weather"),
				InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)}}}},
			ToolChoice: &types.ToolChoiceMemberAuto{Value: types.AutoToolChoice{}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	official := f.Last()
	p := newProvider(t, f)
	if _, _, err := serve(t, p, providers.OpChat, claude, `{"model":"x","max_tokens":100,"temperature":0.5,"top_p":0.25,"stop":"END",
		"messages":[{"role":"system","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,`+base64.StdEncoding.EncodeToString(png)+`"}}]},
		{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"t1","content":"18C"}],
		"tools":[{"type":"function","function":{"name":"weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
		"tool_choice":"auto"}`); err != nil {
		t.Fatal(err)
	}
	ours := f.Last()
	canon := func(b []byte) string {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	if a, b := canon(ours.Body), canon(official.Body); a != b {
		t.Fatalf("the adapter sent\n%s\nthe official client\n%s", a, b)
	}
	if ours.Op != official.Op || ours.Model != official.Model || ours.Header.Get("Content-Type") != official.Header.Get("Content-Type") {
		t.Fatalf("adapter %s %s %q, official %s %s %q", ours.Op, ours.Model, ours.Header.Get("Content-Type"),
			official.Op, official.Model, official.Header.Get("Content-Type"))
	}
}
