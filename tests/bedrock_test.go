package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/bedrock"
	"github.com/tollgate/tollgate/providers/bedrock/bedrocktest"
)

const (
	bedrockRegion = "eu-west-3"
	bedrockClaude = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
	// bedrockQuotaModel has a model rule of Bedrock's quota in
	// bedrockConfig: 60,000 tokens a minute.
	bedrockQuotaModel = "eu.anthropic.claude-opus-4-5-20251101-v1:0"
)

const bedrockConfig = `
providers:
  - name: bedrock
    type: bedrock
    region: ` + bedrockRegion + `
models:
  - name: claude
    targets:
      - model: bedrock/` + bedrockClaude + `
rate_limits:
  models:
    - model: bedrock/` + bedrockQuotaModel + `
      limits:
        - {period: minute, max_tokens: 60000, quota: bedrock}
`

// startBedrockGateway runs the gateway binary as a user runs it locally
// (embedded store, dev mode, the reconciler on a short ticker) with a
// Bedrock provider that reaches the fake through the SDK's own variable,
// AWS_ENDPOINT_URL_BEDROCK_RUNTIME, with the SDK's credential chain
// (here the environment's keys). It returns the gateway's URL.
func startBedrockGateway(t *testing.T, bin string, fake *bedrocktest.Fake) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(cfg, []byte(bedrockConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	_, cmd := firstAnswer(t, bin, "/healthz", "",
		"TOLLGATE_CONFIG="+cfg, "TOLLGATE_STORE=memory", "TOLLGATE_MASTER_KEY=", "TOLLGATE_RECONCILE_INTERVAL=200ms",
		"AWS_ENDPOINT_URL_BEDROCK_RUNTIME="+fake.URL, "AWS_ENDPOINT_URL=", "AWS_REGION="+bedrockRegion,
		"AWS_ACCESS_KEY_ID="+bedrocktest.AccessKey, "AWS_SECRET_ACCESS_KEY="+bedrocktest.SecretKey, "AWS_SESSION_TOKEN=",
		"AWS_PROFILE=", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true")
	t.Cleanup(func() { stop(cmd) })
	for _, kv := range cmd.Env {
		if port, ok := strings.CutPrefix(kv, "PORT="); ok {
			return "http://127.0.0.1:" + port
		}
	}
	t.Fatal("no port")
	return ""
}

// A gateway process with a Bedrock provider, driven by the official
// clients: npm openai (chat, a stream whose chunks arrive apart with the
// usage last, a tool round trip, Titan and Cohere embeddings),
// @anthropic-ai/sdk (a message, a stream) and openai-go; and Bedrock's
// quota on a Claude model rule, end to end.
func TestBedrockGateway(t *testing.T) {
	needNodePackages(t, "openai", "@anthropic-ai/sdk")
	fake := bedrocktest.New(t, bedrockRegion)
	url := startBedrockGateway(t, buildBinary(t, "../functions/gateway"), fake)

	t.Run("NodeSDKs", func(t *testing.T) {
		fake.SetFrameDelay(60 * time.Millisecond)
		defer fake.SetFrameDelay(0)
		cmd := exec.Command("node", "node/bedrock.mjs")
		cmd.Env = append(os.Environ(), "TOLLGATE_URL="+url, "CHAT_MODEL=claude", "CLAUDE="+bedrockClaude)
		out, err := cmd.Output()
		var res struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
			Chat  struct {
				Text, Finish string
				Usage        struct {
					PromptTokens     int64 `json:"prompt_tokens"`
					CompletionTokens int64 `json:"completion_tokens"`
				}
			}
			Stream struct {
				Text  string
				Times []int64
				Usage *struct {
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
				UsageLast bool `json:"usage_last"`
			}
			Tools struct {
				Finish, Name, Answer string
				Arguments            map[string]string
			}
			Embeddings struct {
				Titan       [][]float64 `json:"titan"`
				TitanFloat  []float64   `json:"titan_float"`
				TitanTokens int64       `json:"titan_tokens"`
				Cohere      [][]float64 `json:"cohere"`
			}
			Messages struct {
				Text  string
				Usage struct {
					InputTokens  int64 `json:"input_tokens"`
					OutputTokens int64 `json:"output_tokens"`
				}
			}
			MessagesStream struct {
				Text   string
				Events []string
				Usage  struct {
					OutputTokens int64 `json:"output_tokens"`
				}
			} `json:"messages_stream"`
		}
		_ = json.Unmarshal(out, &res)
		if err != nil || !res.OK {
			t.Fatalf("node clients: %v %s", err, strings.TrimSpace(string(out)))
		}
		if res.Chat.Text != "Hello from Bedrock! You said: Hello" || res.Chat.Finish != "stop" || res.Chat.Usage.PromptTokens != 100 || res.Chat.Usage.CompletionTokens != 200 {
			t.Errorf("chat %+v", res.Chat)
		}
		s := res.Stream
		if s.Text != "Hello from Bedrock! You said: Tell me something" || s.Usage == nil || s.Usage.CompletionTokens != 200 || !s.UsageLast {
			t.Errorf("stream %+v", s)
		}
		// Frames 60 ms apart upstream reach the client apart: streamed, not
		// buffered into one answer.
		if len(s.Times) < 3 || s.Times[len(s.Times)-1]-s.Times[0] < 90 {
			t.Errorf("stream chunks arrived at %v (ms): not apart", s.Times)
		}
		if res.Tools.Finish != "tool_calls" || res.Tools.Name != "weather" || res.Tools.Arguments["city"] != "Paris" ||
			res.Tools.Answer != "The tool said: 18 degrees and sunny" {
			t.Errorf("tools %+v", res.Tools)
		}
		e := res.Embeddings
		if len(e.Titan) != 2 || len(e.Cohere) != 2 || e.TitanTokens != 4 {
			t.Fatalf("embeddings %+v", e)
		}
		for i, want := range bedrocktest.Vector("hello world", 4) {
			if math.Abs(e.Titan[0][i]-want) > 1e-6 || math.Abs(e.TitanFloat[i]-want) > 1e-9 || math.Abs(e.Cohere[0][i]-want) > 1e-6 {
				t.Fatalf("vectors titan %v (float %v) cohere %v, want %v", e.Titan[0], e.TitanFloat, e.Cohere[0], want)
			}
		}
		if res.Messages.Text != "Hello from Claude on Bedrock!" || res.Messages.Usage.OutputTokens != 200 {
			t.Errorf("messages %+v", res.Messages)
		}
		if res.MessagesStream.Text != "Hello from Claude on Bedrock!" || res.MessagesStream.Usage.OutputTokens != 200 ||
			len(res.MessagesStream.Events) != 8 || res.MessagesStream.Events[7] != "message_stop" {
			t.Errorf("messages stream %+v", res.MessagesStream)
		}
		for _, r := range fake.Requests() {
			if r.Op == "invoke" && strings.Contains(r.Model, "claude") && strings.Contains(string(r.Body), `"model"`) {
				t.Errorf("InvokeModel body carries the model: %s", r.Body)
			}
		}
	})

	t.Run("OpenAIGo", func(t *testing.T) {
		c := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("tg-go"), option.WithMaxRetries(0))
		resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "claude", MaxCompletionTokens: openai.Int(64),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi from Go")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != "Hello from Bedrock! You said: Hi from Go" || resp.Usage.CompletionTokens != 200 {
			t.Fatalf("openai-go %+v", resp)
		}
		var sent struct {
			InferenceConfig struct {
				MaxTokens int64 `json:"maxTokens"`
			} `json:"inferenceConfig"`
		}
		_ = json.Unmarshal(fake.Last().Body, &sent)
		if sent.InferenceConfig.MaxTokens != 64 {
			t.Fatalf("max_completion_tokens sent as %s", fake.Last().Body)
		}
		stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model: "claude", MaxTokens: openai.Int(64), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream")},
		})
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if stream.Err() != nil || acc.Choices[0].Message.Content != "Hello from Bedrock! You said: Stream" || acc.Usage.TotalTokens != 300 {
			t.Fatalf("openai-go stream %+v %v", acc.ChatCompletion, stream.Err())
		}
	})

	t.Run("Quota", func(t *testing.T) { bedrockQuotaEndToEnd(t, url, fake) })
}

// Bedrock's quota on a Claude model rule of 60,000 tokens a minute, end to
// end: requests of a short prompt and max_tokens 1,000 are charged the
// prompt + 1,000 × 5, so 11 are admitted and the 12th is refused by the
// gateway without reaching Bedrock; explain shows the arithmetic; once
// the reconciler settled the answers (100 input and 200 output tokens
// each, as the fake reports), the rule holds 100 + 200 × 5 per request.
func bedrockQuotaEndToEnd(t *testing.T, url string, fake *bedrocktest.Fake) {
	// Stay in one minute window: the counts read below are one window's.
	if s := time.Now().Second(); s > 45 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	chat := func() *http.Response {
		t.Helper()
		res, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(
			`{"model":"bedrock/`+bedrockQuotaModel+`","max_tokens":1000,"messages":[{"role":"user","content":"Hello there"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	// The 11 are held at Bedrock, unanswered, while the 12th is decided:
	// none has completed, so the reconciler (every 200 ms) cannot have
	// settled one and made room for it.
	release := make(chan struct{})
	fake.Hold(release)
	statuses := make(chan int, 11)
	for range 11 {
		go func() {
			res, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(
				`{"model":"bedrock/`+bedrockQuotaModel+`","max_tokens":1000,"messages":[{"role":"user","content":"Hello there"}]}`))
			if err != nil {
				statuses <- -1
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses <- res.StatusCode
		}()
	}
	for deadline := time.Now().Add(20 * time.Second); fake.Calls(bedrockQuotaModel) < 11 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res := chat()
	close(release)
	fake.Hold(nil)
	for i := range 11 {
		if s := <-statuses; s != 200 {
			t.Fatalf("request %d of the 11: %d", i+1, s)
		}
	}
	if res.StatusCode != 429 || res.Header.Get("X-Tollgate-Decision") != proxy.DecisionLocalReject ||
		!strings.HasPrefix(res.Header.Get("X-Tollgate-Rule"), "model:bedrock/"+bedrockQuotaModel) {
		t.Fatalf("12th request: %d %q %q", res.StatusCode, res.Header.Get("X-Tollgate-Decision"), res.Header.Get("X-Tollgate-Rule"))
	}
	if n := fake.Calls(bedrockQuotaModel); n != 11 {
		t.Fatalf("Bedrock was called %d times; the 12th must be refused before it", n)
	}

	ex := adminJSON(t, "POST", url+"/admin/explain", `{"user_path":"/","provider":"bedrock","model":"`+bedrockQuotaModel+`","input_tokens":100,"max_tokens":1000}`)
	var explained struct {
		Rules []struct {
			Asked      string `json:"asked"`
			Quota      string `json:"quota"`
			Arithmetic *struct {
				OutputBurndown int64  `json:"output_burndown"`
				Charge         string `json:"charge"`
			} `json:"arithmetic"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(ex, &explained); err != nil || len(explained.Rules) != 1 {
		t.Fatalf("explain %s", ex)
	}
	if r := explained.Rules[0]; r.Asked != "5100" || r.Quota != "bedrock" || r.Arithmetic == nil || r.Arithmetic.OutputBurndown != 5 ||
		!strings.Contains(r.Arithmetic.Charge, "100 + 1000 × 5 = 5100") {
		t.Fatalf("explained %s", ex)
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		var list struct {
			RateLimits []struct {
				Subject string `json:"subject"`
				Usage   struct {
					Tokens struct {
						Used int64 `json:"used"`
					} `json:"tokens"`
				} `json:"usage"`
			} `json:"rate_limits"`
		}
		_ = json.Unmarshal(adminJSON(t, "GET", url+"/admin/rate-limits", ""), &list)
		var used int64 = -1
		for _, r := range list.RateLimits {
			if r.Subject == "bedrock/"+bedrockQuotaModel {
				used = r.Usage.Tokens.Used
			}
		}
		if used == 11*1_100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rule holds %d after settlement, want 11 × (100 + 200 × 5) = 12100", used)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The admin API takes the quota in rule bodies, and refuses it where
	// it has no meaning.
	created := adminJSON(t, "POST", url+"/admin/rate-limits", `{"scope":"provider","subject":"bedrock","limit_key":{"period":"minute"},"max_tokens":2000000,"quota":"bedrock"}`)
	if !strings.Contains(string(created), `"quota":"bedrock"`) {
		t.Fatalf("created %s", created)
	}
	req, _ := http.NewRequest("POST", url+"/admin/rate-limits", strings.NewReader(`{"user_path":"/team","limit_key":{"period":"minute"},"max_tokens":1000,"quota":"bedrock"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 400 || !strings.Contains(string(b), "only provider and model rules") {
		t.Fatalf("a user-path rule of Bedrock's quota: %d %s", res.StatusCode, b)
	}
}

func adminJSON(t *testing.T, method, url, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer dev")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	return b
}

func staticAWS(context.Context) (aws.Config, error) {
	return aws.Config{Region: bedrockRegion, Credentials: credentials.NewStaticCredentialsProvider(bedrocktest.AccessKey, bedrocktest.SecretKey, "")}, nil
}

// A virtual model whose first target is a Bedrock model that throttles:
// the request fails over to the next target at once (Bedrock is asked
// once, no SDK retries), and the throttled target cools down for the whole
// fleet: another gateway instance sharing the DynamoDB store sends its
// requests straight to the second target.
func TestBedrockThrottleFailsOverAndCoolsDown(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	fake := bedrocktest.New(t, bedrockRegion)
	const primary, secondary = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0", "eu.anthropic.claude-haiku-4-5-20251001-v1:0"
	fake.Throttle(primary, -1)
	instance := func() *httptest.Server {
		store, err := dynamostore.New(dynamostore.Options{API: dynamotest.Client(t, dynamostore.ClientOptions{}), TablePrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		l, _ := limiter.New(limiter.Config{Store: store})
		eu, _ := bedrock.New(bedrock.Config{Name: "bedrock-eu", Endpoint: fake.URL, AWS: staticAWS})
		backup, _ := bedrock.New(bedrock.Config{Name: "bedrock-backup", Endpoint: fake.URL, AWS: staticAWS})
		cat, err := providers.NewCatalog([]providers.Provider{eu, backup}, []providers.Alias{{Name: "claude", Strategy: providers.Failover,
			Targets: []providers.AliasTarget{{Target: "bedrock-eu/" + primary}, {Target: "bedrock-backup/" + secondary}}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat, Cooldowns: store, DefaultCooldown: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	chat := func(srv *httptest.Server) *http.Response {
		res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"claude","max_tokens":50,"messages":[{"role":"user","content":"Hello"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	one, two := instance(), instance()
	if res := chat(one); res.StatusCode != 200 || res.Header.Get("X-Tollgate-Provider") != "bedrock-backup" {
		t.Fatalf("after the throttle: %d from %q, want 200 from bedrock-backup", res.StatusCode, res.Header.Get("X-Tollgate-Provider"))
	}
	if p, s := fake.Calls(primary), fake.Calls(secondary); p != 1 || s != 1 {
		t.Fatalf("Bedrock calls: throttled target %d, backup %d; want 1 and 1", p, s)
	}
	for i := range 3 {
		if res := chat(two); res.StatusCode != 200 || res.Header.Get("X-Tollgate-Provider") != "bedrock-backup" {
			t.Fatalf("instance two, request %d: %d from %q", i, res.StatusCode, res.Header.Get("X-Tollgate-Provider"))
		}
	}
	if p := fake.Calls(primary); p != 1 {
		t.Fatalf("the throttled target was called %d times during its cooldown", p)
	}
}

// Bedrock's quota settled from the lease table's stream: the reconciler
// reads each lease as DynamoDB recorded it, the burndown in its charge,
// and settles it once, however often the records are read.
func TestBedrockQuotaReconciledFromStream(t *testing.T) {
	rule := limiter.Rule{Scope: limiter.ScopeModel, Subject: "bedrock/" + bedrockQuotaModel, Limit: limiter.Window{Period: time.Minute, MaxTokens: 60_000, Quota: limiter.QuotaBedrock}}
	f := newReconcileFixture(t, rule)
	ctx := context.Background()
	now := time.Now().Truncate(time.Minute).Add(5 * time.Second)
	for i := range 12 {
		d, err := f.limiter.Admit(ctx, now, limiter.Request{ID: fmt.Sprintf("bq-%d", i),
			Subject: limiter.Subject{UserPath: "/team", Provider: "bedrock", Model: bedrockQuotaModel},
			Route:   "chat", InputTokens: 100, OutputTokens: 1000, OutputBurndown: 5})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 11) {
			t.Fatalf("request %d: allowed %v", i+1, d.Allowed)
		}
		if d.Allowed {
			used := limiter.Usage{InputTokens: 100, OutputTokens: 200, Exact: true}
			if i == 0 { // 40 of its input tokens read from the cache: given back
				used = limiter.Usage{InputTokens: 60, CachedInputTokens: 40, OutputTokens: 200, Exact: true}
			}
			if err := f.limiter.Complete(ctx, now, d.Lease, used); err != nil {
				t.Fatal(err)
			}
		}
	}
	clock := func() time.Time { return now }
	if got := f.read(t, now, nil)[string(rule.Key())+"/tok"]; got != 11*5_100 {
		t.Fatalf("before settlement the rule holds %d, want 11 × 5,100", got)
	}
	for range 2 {
		if _, err := f.reconciler(t, clock).Run(ctx); err != nil {
			t.Fatal(err)
		}
		f.dropCheckpoints(t)
	}
	if got := f.read(t, now, nil)[string(rule.Key())+"/tok"]; got != 11*1_100-40 {
		t.Fatalf("settled from the stream, the rule holds %d, want 11 × (100 + 200 × 5) − 40", got)
	}
}

// A request refused by a window of Bedrock's quota can go with a lower
// output cap (gateway.clamp_max_tokens_floor): one that fits counting each
// output token five times, not once.
func TestBedrockQuotaClamp(t *testing.T) {
	fake := bedrocktest.New(t, bedrockRegion)
	p, _ := bedrock.New(bedrock.Config{Name: "bedrock", Endpoint: fake.URL, AWS: staticAWS})
	rs, err := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeModel, Subject: "bedrock/" + bedrockQuotaModel, Limit: limiter.Window{Period: time.Minute, MaxTokens: 6_000, Quota: limiter.QuotaBedrock}}})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{p}, nil, nil)
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat, ClampFloor: 100})
	if err != nil {
		t.Fatal(err)
	}
	chat := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(
			`{"model":"bedrock/`+bedrockQuotaModel+`","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := chat(); w.Code != 200 || w.Header().Get(proxy.HeaderClamped) != "" {
		t.Fatalf("first request: %d, clamped %q", w.Code, w.Header().Get(proxy.HeaderClamped))
	}
	// About 1,000 tokens are left: a cap of about 200, charged × 5, fits.
	w := chat()
	clamped, _ := strconv.ParseInt(w.Header().Get(proxy.HeaderClamped), 10, 64)
	if w.Code != 200 || clamped < 100 || clamped > 200 {
		t.Fatalf("second request: %d, clamped to %q; want a cap of at most (6,000 − 5,100 − prompts) / 5", w.Code, w.Header().Get(proxy.HeaderClamped))
	}
	var sent struct {
		InferenceConfig struct {
			MaxTokens int64 `json:"maxTokens"`
		} `json:"inferenceConfig"`
	}
	_ = json.Unmarshal(fake.Last().Body, &sent)
	if sent.InferenceConfig.MaxTokens != clamped {
		t.Fatalf("Bedrock got maxTokens %d, the header says %d", sent.InferenceConfig.MaxTokens, clamped)
	}
}
