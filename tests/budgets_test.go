package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
)

// Budgets end to end: the app on DynamoDB Local with a budget and a price
// from its file, the mock provider, the reconciler.

// writeConfig writes a tollgate.yaml for one test and returns its path.
func writeConfig(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// budgetConfig gives /team $0.01 a day, and prices gpt-4o output at $30
// per million tokens (input free): a chat with max_tokens 100 reserves
// $0.003, and the mock's 16-token answer costs $0.00048.
const budgetConfig = `
prices:
  gpt-4o: {input: 0, output: 30}
budgets:
  user_paths:
    - {path: /team, amount_usd: 0.01, period: day}
`

const budgetChat = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`

type budgetUsageDoc struct {
	Budget      string `json:"budget"`
	SpentUSD    string `json:"spent_usd"`
	ReservedUSD string `json:"reserved_usd"`
	Remaining   string `json:"remaining_usd"`
}

func usageBudgets(t *testing.T, in *instance, path string) []budgetUsageDoc {
	t.Helper()
	res := in.do(t, "GET", "/v1/usage", master, "", "X-Tollgate-User-Path", path)
	var out struct {
		Budgets []budgetUsageDoc `json:"budgets"`
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("usage: %d %s", res.StatusCode, b)
	}
	return out.Budgets
}

// reconcile runs the app's reconciler until nothing is left reserved on
// path's budgets, or fails after a bound.
func reconcileBudgets(t *testing.T, in *instance, path string) []budgetUsageDoc {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rc, err := in.app.NewReconciler(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		bs := usageBudgets(t, in, path)
		if len(bs) > 0 && bs[0].ReservedUSD == "0.00" {
			return bs
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservations still unsettled: %+v", bs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A $0.01 budget admits three requests reserving $0.003. The fourth is
// refused for what is reserved, not spent: a retryable 429 (no
// x-should-retry: false) whose Retry-After is the reconciler's interval
// and a second, in each protocol's shape, with both amounts; after
// settlement a retry is admitted. Once spent money leaves no room, the
// refusal is insufficient_quota until midnight.
func TestBudgetThroughTheGateway(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	in := newInstance(t, prefix, t0, config.Env{"TOLLGATE_CONFIG": writeConfig(t, budgetConfig)})
	for i, want := range []string{"0.007", "0.004", "0.001"} {
		res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/team/app")
		if res.StatusCode != 200 {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("request %d: %d %s", i, res.StatusCode, b)
		}
		if got := res.Header.Get("X-Tollgate-Budget-Remaining-Usd"); got != want {
			t.Fatalf("request %d: budget remaining %q, want %q", i, got, want)
		}
		if got := res.Header.Get("X-Tollgate-Budget-Reset"); got != "2026-12-02T00:00:00Z" {
			t.Fatalf("budget reset %q", got)
		}
	}
	res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/team/app")
	b, _ := io.ReadAll(res.Body)
	e := decodeOpenAIError(t, b)
	if res.StatusCode != 429 || e.Type != "rate_limit_error" || e.Code == nil || *e.Code != "budget_reserved" {
		t.Fatalf("fourth request, refused for reservations: %d %s", res.StatusCode, b)
	}
	// The reconciler runs every 5 s (TOLLGATE_RECONCILE_INTERVAL's
	// default): the reservations are back within 6 s of completing.
	if res.Header.Get("Retry-After") != "6" || res.Header.Get("X-Should-Retry") != "" ||
		res.Header.Get("X-Tollgate-Rule") != "budget:user_path:/team:day" {
		t.Fatalf("refusal headers %v", res.Header)
	}
	if !strings.Contains(e.Message, "daily budget of $0.01 has $0.00 spent and $0.009 reserved") || !strings.Contains(e.Message, "reserved, not spent") {
		t.Fatalf("message %q", e.Message)
	}
	// Anthropic's route answers in its own shape.
	res = in.do(t, "POST", "/v1/messages", master, `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`,
		"X-Tollgate-User-Path", "/team/app")
	b, _ = io.ReadAll(res.Body)
	if res.StatusCode != 429 || !strings.Contains(string(b), `"type":"error"`) || !strings.Contains(string(b), `"rate_limit_error"`) ||
		res.Header.Get("Retry-After") != "6" {
		t.Fatalf("messages refusal: %d %s", res.StatusCode, b)
	}
	bs := usageBudgets(t, in, "/team/app")
	if len(bs) != 1 || bs[0].ReservedUSD != "0.009" || bs[0].SpentUSD != "0.00" || bs[0].Remaining != "0.001" {
		t.Fatalf("before settlement: %+v", bs)
	}
	bs = reconcileBudgets(t, in, "/team/app")
	if bs[0].SpentUSD != "0.00144" || bs[0].Remaining != "0.00856" {
		t.Fatalf("after settlement: %+v, want $0.00144 spent (3 × 16 tokens at $30/M)", bs)
	}
	in.clock.Add(6 * time.Second) // the Retry-After
	res = in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/team/app")
	if res.StatusCode != 200 || res.Header.Get("X-Tollgate-Budget-Remaining-Usd") != "0.00556" {
		t.Fatalf("the retry at Retry-After: %d, remaining %q", res.StatusCode, res.Header.Get("X-Tollgate-Budget-Remaining-Usd"))
	}
	// Another user path is not under /team's budget.
	if res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/other"); res.StatusCode != 200 ||
		res.Header.Get("X-Tollgate-Budget-Remaining-Usd") != "" {
		t.Fatalf("/other: %d %v", res.StatusCode, res.Header)
	}
	// Spend the rest: each answer costs $0.00048. Refusals for
	// reservations are settled and retried, until spending leaves no room.
	spent := false
	for i := 0; i < 60 && !spent; i++ {
		res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/team/app")
		b, _ := io.ReadAll(res.Body)
		switch {
		case res.StatusCode == 200:
		case res.StatusCode == 429 && strings.Contains(string(b), `"budget_reserved"`):
			reconcileBudgets(t, in, "/team/app")
		case res.StatusCode == 429 && strings.Contains(string(b), `"insufficient_quota"`):
			spent = true
			if res.Header.Get("Retry-After") != strconv.Itoa(4*3600-6) || res.Header.Get("X-Should-Retry") != "false" {
				t.Fatalf("refusal with the budget spent: headers %v", res.Header)
			}
			if e := decodeOpenAIError(t, b); e.Code == nil || *e.Code != "insufficient_quota" || !strings.Contains(e.Message, "budget exhausted for /team") {
				t.Fatalf("refusal with the budget spent: %s", b)
			}
		default:
			t.Fatalf("request %d: %d %s", i, res.StatusCode, b)
		}
	}
	if !spent {
		t.Fatal("the budget was never refused as spent")
	}
	// The next day is a new period: a new item, nothing reset anything.
	in.clock.Add(4 * time.Hour)
	if res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/team/app"); res.StatusCode != 200 ||
		res.Header.Get("X-Tollgate-Budget-Remaining-Usd") != "0.007" {
		t.Fatalf("next day: %d %q", res.StatusCode, res.Header.Get("X-Tollgate-Budget-Remaining-Usd"))
	}
}

// A stream cut after k chunks is charged at least k output tokens: its
// usage is inexact, so its reservation is never refunded below what it
// delivered.
func TestStreamCutChargedToBudget(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	up := newUpstream(t, replaySSE(t, "openai_chat_stream.sse", 50*time.Millisecond))
	in := newInstance(t, prefix, t0, config.Env{"OPENAI_API_KEY": "k", "TOLLGATE_CONFIG": writeConfig(t, budgetConfig+`
providers:
  - {name: openai, type: openai, base_url: `+up.URL+`/v1, api_key_env: OPENAI_API_KEY}
`)})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", in.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":100}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+master)
	req.Header.Set("X-Tollgate-User-Path", "/team/app")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	chunks := 0
	var line []byte
	for chunks < 3 {
		if _, err := res.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		line = append(line, buf[0])
		if buf[0] == '\n' {
			if strings.HasPrefix(string(line), "data: {") {
				chunks++
			}
			line = line[:0]
		}
	}
	cancel()
	res.Body.Close()
	bs := reconcileBudgets(t, in, "/team/app")
	spent, err := limiter.ParseUSD(bs[0].SpentUSD)
	if err != nil {
		t.Fatal(err)
	}
	if min := int64(chunks) * 30; spent < min {
		t.Fatalf("a stream cut after %d chunks was charged $%s, less than %d output tokens", chunks, bs[0].SpentUSD, chunks)
	}
	if spent != 3000 {
		t.Fatalf("spent $%s: an inexact usage keeps its whole reservation ($0.003)", bs[0].SpentUSD)
	}
}

// Three gateway processes on one DynamoDB, 60 requests at once against a
// $0.02 budget whose requests reserve $0.002: exactly ten are admitted,
// never more, and the three processes' reconcilers settle each exactly
// once.
func TestBudgetHoldsAcrossProcesses(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	ddb := dynamotest.Endpoint(t)
	up := newCountingUpstream(t) // answers 9 prompt and 1 completion token
	// Admitted requests stay upstream until every admission is decided:
	// none is settled, and none frees room, during the burst.
	up.delay.Store(int64(2 * time.Second))
	bin := buildFunction(t, "gateway")
	gws := startGateways(t, bin, 3, prefix, ddb, up.URL, `
prices:
  b: {input: 0, output: 500}
budgets:
  user_paths:
    - {path: /b, amount_usd: 0.02, period: day}
`)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			c := chatVia(gws[i%3], "/b", "b") // max_tokens 4: $0.002 reserved
			mu.Lock()
			codes[c]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] > 10 || codes[200] < 1 || codes[200]+codes[429] != 60 {
		t.Fatalf("answers %v: at most ten of $0.002 fit $0.02", codes)
	}
	admitted := codes[200]
	// Each cost one completion token: $0.0005. The reconcilers (one per
	// process, every second) settle each exactly once.
	want := limiter.FormatUSD(int64(admitted) * 500)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := clientHTTP.Do(func() *http.Request {
			r, _ := http.NewRequest("GET", gws[0].url+"/v1/usage", nil)
			r.Header.Set("X-Tollgate-User-Path", "/b")
			return r
		}())
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Budgets []budgetUsageDoc `json:"budgets"`
		}
		_ = json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		if len(out.Budgets) == 1 && out.Budgets[0].ReservedUSD == "0.00" {
			if out.Budgets[0].SpentUSD != want {
				t.Fatalf("spent %s after settlement, want %s (%d × $0.0005): settled more or less than once", out.Budgets[0].SpentUSD, want, admitted)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled: %+v", out.Budgets)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Settled, the budget takes more: at least (0.02 − spent) / 0.002
	// requests (more as their own settlements come in).
	up.delay.Store(0)
	more := 0
	for range 20 {
		if chatVia(gws[more%3], "/b", "b") == 200 {
			more++
		}
	}
	if fit := (20_000 - admitted*500) / 2000; more < fit {
		t.Fatalf("%d more admitted after settlement, want at least %d", more, fit)
	}
}

// With usage above the reservation (the upstream counts more input than
// the estimate), a client that waits for each answer overspends the
// budget by at most one request's overshoot.
func TestBudgetOvershootBound(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// The upstream counts 100 prompt tokens whatever was sent: far more
	// than the gateway's estimate of "hi".
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"b","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":1,"total_tokens":101}}`)
	})
	in := newInstance(t, prefix, t0, config.Env{"OPENAI_API_KEY": "k",
		"TOLLGATE_CONFIG": writeConfig(t, `
providers:
  - {name: openai, type: openai, base_url: `+up.URL+`/v1, api_key_env: OPENAI_API_KEY}
prices:
  openai/b: {input: 100, output: 0}
budgets:
  user_paths:
    - {path: /o, amount_usd: 0.1, period: day}
`)})
	body := `{"model":"openai/b","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	var overshoot int64
	for i := range 100 {
		res := in.do(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/o")
		if res.StatusCode == 429 {
			break
		}
		if res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
		if i == 0 {
			left, _ := limiter.ParseUSD(res.Header.Get("X-Tollgate-Budget-Remaining-Usd"))
			overshoot = 10_000 - (100_000 - left) // actual $0.01 less what was reserved
			if overshoot <= 0 {
				t.Fatalf("the estimate is not below the upstream's count: reserved %d µ$", 100_000-left)
			}
		}
		reconcileBudgets(t, in, "/o")
	}
	bs := usageBudgets(t, in, "/o")
	spent, _ := limiter.ParseUSD(bs[0].SpentUSD)
	if spent > 100_000+overshoot || spent <= 100_000-10_000 {
		t.Fatalf("spent $%s of $0.10, overshoot per request %d µ$: want at most the budget plus one overshoot", bs[0].SpentUSD, overshoot)
	}
	t.Logf("spent $%s of a $0.10 budget; one request's overshoot is $%s", bs[0].SpentUSD, limiter.FormatUSD(overshoot))
}

// Explain reads what admission would decide, rule by rule and budget by
// budget, and charges nothing.
func TestExplainChargesNothing(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	in := newInstance(t, prefix, t0, config.Env{"TOLLGATE_CONFIG": writeConfig(t, budgetConfig+`
rate_limits:
  user_paths:
    - path: /
      limits: [{period: minute, max_requests: 10}]
    - path: /team
      limits: [{period: minute, max_requests: 2, priority: 1}]
`)})
	explain := `{"user_path":"/team/app","provider":"mock","model":"gpt-4o","input_tokens":10,"max_tokens":100}`
	for range 3 {
		s, b := in.call(t, "POST", "/admin/explain", master, explain)
		if s != 200 || !strings.Contains(string(b), `"allowed":true`) || !strings.Contains(string(b), `"reserved_usd":"0.003"`) ||
			!strings.Contains(string(b), `"overridden":true`) || !strings.Contains(string(b), `"charged":false`) {
			t.Fatalf("explain: %d %s", s, b)
		}
	}
	if bs := usageBudgets(t, in, "/team/app"); bs[0].ReservedUSD != "0.00" {
		t.Fatalf("explain charged the budget: %+v", bs)
	}
	for range 2 {
		if s := in.chat(t, master, "X-Tollgate-User-Path", "/team/app"); s != 200 {
			t.Fatalf("chat: %d", s)
		}
	}
	s, b := in.call(t, "POST", "/admin/explain", master, explain)
	if s != 200 || !strings.Contains(string(b), `"allowed":false`) || !strings.Contains(string(b), `"rule":"user_path:/team:minute"`) ||
		!strings.Contains(string(b), `"retry_after_ms":90000`) {
		t.Fatalf("explain when refused: %d %s", s, b)
	}
	if s, b := in.call(t, "POST", "/admin/explain", master, `{"user_path":"team","input_tokens":-1,"tags":"a"}`); s != 400 ||
		!strings.Contains(string(b), "user_path") || !strings.Contains(string(b), "input_tokens") || !strings.Contains(string(b), "tags") {
		t.Fatalf("bad explain: %d %s", s, b)
	}
}

// The admin API's budgets: create, list with live spending, update with
// versions and 409s, reset one, delete; config budgets are read-only; a
// bad budget is refused with every problem listed.
func TestAdminBudgets(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	in := newInstance(t, prefix, t0, config.Env{"TOLLGATE_CONFIG": writeConfig(t, budgetConfig)})
	s, b := in.call(t, "POST", "/admin/budgets", master, `{"user_path":"/lab","period":"day","amount_usd":"0.006"}`)
	if s != 201 || !strings.Contains(string(b), `"amount_usd":"0.006"`) || !strings.Contains(string(b), `"id":"budget:user_path:/lab:day"`) {
		t.Fatalf("create: %d %s", s, b)
	}
	for i := range 3 {
		want := map[int]int{0: 200, 1: 200, 2: 429}[i]
		if res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/lab/x"); res.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, res.StatusCode, want)
		}
	}
	s, b = in.call(t, "GET", "/admin/budgets", master, "")
	if s != 200 || !strings.Contains(string(b), `"reserved_usd":"0.006"`) || !strings.Contains(string(b), `"source":"config"`) {
		t.Fatalf("list: %d %s", s, b)
	}
	if s, b := in.call(t, "GET", "/admin/rate-limits", master, ""); s != 200 || strings.Contains(string(b), "$day") {
		t.Fatalf("budgets listed as rate limits: %s", b)
	}
	if s, b := in.call(t, "PUT", "/admin/budgets/budget:user_path:/lab:day", master, `{"amount_usd":"0.006"}`); s != 200 || !strings.Contains(string(b), `"version":2`) {
		t.Fatalf("PUT without a version updates: %d %s", s, b)
	}
	if s, b := in.call(t, "PUT", "/admin/budgets", master, `{"user_path":"/lab","period":"day","amount_usd":1,"version":7}`); s != 409 {
		t.Fatalf("stale version: %d %s", s, b)
	}
	if s, b := in.call(t, "PATCH", "/admin/budgets/budget:user_path:/lab:day", master, `{"amount_usd":1}`); s != 200 ||
		!strings.Contains(string(b), `"version":3`) || !strings.Contains(string(b), `"amount_usd":"1.00"`) {
		t.Fatalf("update: %d %s", s, b)
	}
	if res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/lab/x"); res.StatusCode != 200 {
		t.Fatalf("a raised budget keeps its spending and admits: %d", res.StatusCode)
	}
	if s, b := in.call(t, "GET", "/admin/budgets/budget:user_path:/lab:day", master, ""); s != 200 || !strings.Contains(string(b), `"spent_usd"`) {
		t.Fatalf("get one: %d %s", s, b)
	}
	if s, b := in.call(t, "POST", "/admin/budgets/reset-one", master, `{"id":"budget:user_path:/lab:day"}`); s != 200 {
		t.Fatalf("reset-one: %d %s", s, b)
	}
	if s, b := in.call(t, "POST", "/admin/budgets", master, `{"user_path":"/team","period":"day","amount_usd":"5"}`); s != 409 ||
		!strings.Contains(string(b), "configuration") {
		t.Fatalf("config budget edited: %d %s", s, b)
	}
	s, b = in.call(t, "POST", "/admin/budgets", master, `{"user_path":"lab","period":"fortnight","amount_usd":"0.0000001"}`)
	if s != 400 || !strings.Contains(string(b), "user_path") || !strings.Contains(string(b), "fortnight") || !strings.Contains(string(b), "six decimals") {
		t.Fatalf("bad budget: %d %s", s, b)
	}
	if s, b := in.call(t, "DELETE", "/admin/budgets/budget:user_path:/lab:day", master, `{"version":3}`); s != 200 {
		t.Fatalf("delete: %d %s", s, b)
	}
	if res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/lab/x"); res.StatusCode != 200 ||
		res.Header.Get("X-Tollgate-Budget-Remaining-Usd") != "" {
		t.Fatalf("a deleted budget still applies: %v", res.Header)
	}
}

// Tags from the header and fixed on a managed key; a rule per key; a
// shadow rule that never refuses but says it would have.
func TestTagsKeysAndShadow(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	in := newInstance(t, prefix, t0, config.Env{"TOLLGATE_CONFIG": writeConfig(t, `
rate_limits:
  tags:
    - {tag: feature, value: each, limits: [{period: minute, max_requests: 2}]}
    - {tag: team, value: total, limits: [{period: minute, max_requests: 3}]}
  keys:
    - {key: each, limits: [{period: minute, max_requests: 4}]}
  user_paths:
    - path: /s
      limits: [{period: minute, max_requests: 1, shadow: true}]
`)})
	for _, f := range []string{"search", "chat"} {
		for i := range 3 {
			res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-Tags", "feature="+f)
			if want := map[bool]int{true: 200, false: 429}[i < 2]; res.StatusCode != want {
				t.Fatalf("feature=%s request %d: %d", f, i, res.StatusCode)
			}
		}
	}
	if res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-Tags", "bad tag"); res.StatusCode != 400 {
		t.Fatalf("a malformed tag header: %d", res.StatusCode)
	}
	// A key fixed to team=a: a client cannot tag its way out of it.
	s, b := in.call(t, "POST", "/admin/keys", master, `{"user_path":"/k","tags":{"team":"a"}}`)
	if s != 201 {
		t.Fatalf("create key: %d %s", s, b)
	}
	var key struct {
		Key string `json:"key"`
		ID  string `json:"id"`
	}
	_ = json.Unmarshal(b, &key)
	codes := []int{}
	for range 5 {
		codes = append(codes, in.do(t, "POST", "/v1/chat/completions", key.Key, budgetChat, "X-Tollgate-Tags", "team=b").StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429]" {
		t.Fatalf("team total of 3 for a key fixed to team=a: %v", codes)
	}
	s, b = in.call(t, "POST", "/admin/keys", master, `{"user_path":"/k2"}`)
	if s != 201 {
		t.Fatal(s)
	}
	var key2 struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal(b, &key2)
	codes = codes[:0]
	for range 5 {
		codes = append(codes, in.do(t, "POST", "/v1/chat/completions", key2.Key, budgetChat).StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 200 429]" {
		t.Fatalf("each key its own 4: %v", codes)
	}
	for i := range 3 {
		res := in.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/s")
		shadow := res.Header.Get("X-Tollgate-Shadow-Refusal")
		if res.StatusCode != 200 || (i > 0) != (shadow == "user_path:/s:minute") {
			t.Fatalf("shadow request %d: %d %q", i, res.StatusCode, shadow)
		}
	}
	if n := in.app.Gateway.ShadowRefusals(); n != 2 {
		t.Fatalf("%d shadow refusals counted, want 2", n)
	}
	if !strings.Contains(in.logs.String(), "shadow rule would have refused") {
		t.Fatal("no log line for the shadow refusal")
	}
}
