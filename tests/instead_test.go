package tests

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// compatConfig is a virtual model of a large model and a small one
// without tools, the large one limited to one request a minute, and a
// model whose first choice serves outside the EU.
const compatConfig = `
providers:
  - name: openai
    type: mock
    models:
      - {id: big, context_window: 128000, tools: true, regions: [us-east-1, eu-west-1]}
      - {id: small, context_window: 8192, tools: false, regions: [us-east-1]}
      - {id: euro, context_window: 32000, tools: true, regions: [eu-west-1]}
models:
  - {name: assistant, targets: [{model: openai/big}, {model: openai/small}]}
  - {name: regional, targets: [{model: openai/small}, {model: openai/euro}]}
rate_limits:
  models:
    - model: openai/big
      limits: [{period: minute, max_requests: 1}]
`

// Fallback asks what the request needs before it goes to any target but
// its first choice: with big saturated, a 20k-token prompt is not sent to
// small (8k), which a 1k-token prompt fails over to; a request with tools
// skips small, which takes none; a caller tagged residency=eu never
// reaches a target outside the EU, first choice included. Each refusal is
// the first choice's 429 with x-tollgate-decision no_compatible_target
// and a message naming why each target was skipped, and explain lists the
// same skips.
func TestFallbackOnlyToCompatibleTargets(t *testing.T) {
	in := newInstance(t, dynamotest.Prefix(t), time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		config.Env{"TOLLGATE_CONFIG": writeConfig(t, compatConfig)})
	words := func(n int) string { return strings.Repeat("word ", n) }
	chat := func(model, prompt, extra string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":100` + extra + `}`
	}
	tools := `,"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}]`
	send := func(body string, hdr ...string) (int, string, string, string) {
		res := in.do(t, "POST", "/v1/chat/completions", master, body, hdr...)
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("X-Tollgate-Model"), res.Header.Get("X-Tollgate-Decision"), string(b)
	}
	if s, m, _, b := send(chat("assistant", "hi", "")); s != 200 || m != "big" {
		t.Fatalf("the first request: %d at %q, want 200 at big: %s", s, m, b)
	}
	explain := func(body string) explained {
		t.Helper()
		s, b := in.call(t, "POST", "/admin/explain", master, body)
		var ex explained
		if s != 200 || json.Unmarshal(b, &ex) != nil {
			t.Fatalf("explain: %d %s", s, b)
		}
		return ex
	}
	skipped := func(ex explained, target, want string) {
		t.Helper()
		for _, tg := range ex.Targets {
			if tg.Target == target && tg.Skipped == "incompatible" && strings.Contains(tg.Why, want) {
				return
			}
		}
		t.Fatalf("explain does not skip %s as incompatible (%q): %+v", target, want, ex.Targets)
	}
	for _, c := range []struct {
		name, body, why string
		hdr             []string
	}{
		{"a prompt of 20,000 words", chat("assistant", words(20_000), ""), "exceed its context window (8,192 tokens)", nil},
		{"a request with tools", chat("assistant", "hi", tools), "it does not take tools", nil},
		{"a caller in the EU", chat("assistant", "hi", ""), "the caller's residency is eu and it serves us-east-1", []string{"X-Tollgate-Tags", "residency=eu"}},
	} {
		s, m, decision, b := send(c.body, c.hdr...)
		if s != 429 || m != "" || decision != "no_compatible_target" || !strings.Contains(b, "openai/small: ") || !strings.Contains(b, c.why) ||
			!strings.Contains(b, "for model openai/big") {
			t.Fatalf("%s: %d at %q, decision %q: %s; want big's 429, no_compatible_target, small skipped because %s", c.name, s, m, decision, b, c.why)
		}
		ex := explain(`{"user_path":"/","model":"assistant","input_tokens":` + map[bool]string{true: "20010", false: "10"}[strings.Contains(c.name, "20,000")] +
			`,"max_tokens":100,"tools":` + map[bool]string{true: "true", false: "false"}[strings.Contains(c.body, `"tools"`)] +
			map[bool]string{true: `,"tags":"residency=eu"`, false: ""}[c.hdr != nil] + `}`)
		if ex.Decision.Status != 429 || ex.Decision.Decision != "no_compatible_target" {
			t.Fatalf("%s: explain says %+v", c.name, ex.Decision)
		}
		skipped(ex, "openai/small", c.why)
	}
	if s, m, _, b := send(chat("assistant", words(1_000), "")); s != 200 || m != "small" {
		t.Fatalf("a 1k-token prompt: %d at %q, want 200 at small: %s", s, m, b)
	}
	// residency=eu: small, the first choice, serves outside the EU; euro
	// takes the request.
	for range 3 {
		if s, m, _, b := send(chat("regional", "hi", ""), "X-Tollgate-Tags", "residency=eu"); s != 200 || m != "euro" {
			t.Fatalf("a caller in the EU on regional: %d at %q, want euro: %s", s, m, b)
		}
	}
	skipped(explain(`{"user_path":"/","model":"regional","tags":"residency=eu"}`), "openai/small", "serves us-east-1")
	// A target no region is declared for is not taken for a caller with a
	// residency, even when named directly.
	if s, _, decision, b := send(chat("openai/unknown", "hi", ""), "X-Tollgate-Tags", "residency=eu"); s != 400 || decision != "no_compatible_target" ||
		!strings.Contains(b, "regions are unknown") {
		t.Fatalf("a caller in the EU on a model of unknown regions: %d %q %s", s, decision, b)
	}
}

// downgradeConfig downgrades batch requests that gpt-4o would refuse to
// gpt-4o-mini, which costs a fiftieth.
const downgradeConfig = `
providers:
  - {name: openai, type: mock, models: [gpt-4o, gpt-4o-mini]}
prices:
  gpt-4o: {input: 0, output: 30}
  gpt-4o-mini: {input: 0, output: 0.6}
budgets:
  user_paths:
    - {path: /team, amount_usd: 0.01, period: day}
downgrade:
  - from: openai/gpt-4o
    to: openai/gpt-4o-mini
    when: {refused: true}
    classes: [batch, background]
`

// A downgrade is an admission outcome of its own: a batch request that
// gpt-4o's budget refuses is served by gpt-4o-mini, and the answer says
// so; an interactive one, which does not opt in, gets the 429. Explain
// says the same.
func TestDowngradeWhenTheBudgetRefuses(t *testing.T) {
	in := newInstance(t, dynamotest.Prefix(t), time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		config.Env{"TOLLGATE_CONFIG": writeConfig(t, downgradeConfig)})
	const body = `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`
	for i := range 3 { // $0.003 reserved each, of $0.01
		if s, b := in.call(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/team/a"); s != 200 {
			t.Fatalf("request %d: %d %s", i, s, b)
		}
	}
	res := in.do(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/team/a", "X-Tollgate-Class", "interactive")
	if res.StatusCode != 429 || res.Header.Get("X-Tollgate-Downgraded-From") != "" {
		t.Fatalf("an interactive request on a full budget: %d, downgraded from %q; want the 429", res.StatusCode, res.Header.Get("X-Tollgate-Downgraded-From"))
	}
	_, eb := in.call(t, "POST", "/admin/explain", master, `{"user_path":"/team/a","model":"openai/gpt-4o","class":"batch","input_tokens":10,"max_tokens":100}`)
	var ex explained
	if err := json.Unmarshal(eb, &ex); err != nil || ex.Decision.Status != 200 || ex.Decision.Target != "openai/gpt-4o-mini" {
		t.Fatalf("explain of a batch request: %s", eb)
	}
	res = in.do(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/team/a", "X-Tollgate-Class", "batch")
	if res.StatusCode != 200 || res.Header.Get("X-Tollgate-Downgraded-From") != "openai/gpt-4o" || res.Header.Get("X-Tollgate-Model") != "gpt-4o-mini" {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("a batch request on a full budget: %d at %q, downgraded from %q: %s", res.StatusCode, res.Header.Get("X-Tollgate-Model"),
			res.Header.Get("X-Tollgate-Downgraded-From"), b)
	}
	if !strings.Contains(in.logs.String(), `"msg":"downgraded: admitted on a cheaper model the class opts into"`) {
		t.Fatal("the downgrade is not logged")
	}
}

// headersConfig is one upstream under a provider rule of 100 requests a
// minute; adapt is replaced by each scenario.
const headersConfig = `
providers:
  - {name: openai, type: compatible, base_url: UPSTREAM/v1}
rate_limits:
  providers:
    - name: openai
      limits: [{period: minute, max_requests: 100, adapt: ADAPT}]
`

// Provider headers tune the governor: an upstream reporting
// x-ratelimit-limit-requests: 50 under a configured provider rule of 100
// is recorded for every instance; explain shows both; the configured rule
// is warned about once; and with adapt: true the rule in force follows
// the report, so the 51st request of the window is refused by the
// gateway without reaching the upstream.
func TestProviderHeadersTuneTheGovernor(t *testing.T) {
	for _, adapt := range []bool{false, true} {
		up := newUpstream(t, replay(t, "openai_chat.json", 200,
			"X-Ratelimit-Limit-Requests", "50", "X-Ratelimit-Remaining-Requests", "49", "X-Ratelimit-Limit-Tokens", "30000"))
		cfg := strings.NewReplacer("UPSTREAM", up.URL, "ADAPT", map[bool]string{true: "true", false: "false"}[adapt]).Replace(headersConfig)
		in := newInstance(t, dynamotest.Prefix(t), time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
			config.Env{"OPENAI_API_KEY": "k", "TOLLGATE_CONFIG": writeConfig(t, cfg)})
		const body = `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
		if s, b := in.call(t, "POST", "/v1/chat/completions", master, body); s != 200 {
			t.Fatalf("adapt %v: the first request: %d %s", adapt, s, b)
		}
		in.clock.Add(6 * time.Second) // past the rules' refresh and the report interval
		served := 1
		refused := 0
		for i := 1; i < 60; i++ {
			res := in.do(t, "POST", "/v1/chat/completions", master, body)
			switch {
			case res.StatusCode == 200:
				served++
			case res.StatusCode == 429 && res.Header.Get("X-Tollgate-Decision") == "local_reject" &&
				res.Header.Get("X-Tollgate-Rule") == "provider:openai:minute":
				refused++
			default:
				t.Fatalf("adapt %v: request %d: %d", adapt, i+1, res.StatusCode)
			}
			if i == 30 {
				in.clock.Add(6 * time.Second) // another report, another look at the rule
			}
		}
		want := map[bool]int{true: 50, false: 60}[adapt]
		if served != want || int(up.calls.Load()) != want || refused != 60-want {
			t.Fatalf("adapt %v: %d served, %d refused by the gateway, %d reached the upstream; want %d served", adapt, served, refused, up.calls.Load(), want)
		}
		if n := strings.Count(in.logs.String(), "a configured rule allows more than the upstream reports it enforces"); n != 1 {
			t.Fatalf("adapt %v: the configured rule warned about %d times, want once", adapt, n)
		}
		_, b := in.call(t, "POST", "/admin/explain", master, `{"user_path":"/","model":"openai/gpt-4o"}`)
		var ex struct {
			Rules []struct {
				Rule            string `json:"rule"`
				Limit           string `json:"limit"`
				ConfiguredLimit string `json:"configured_limit"`
				Upstream        *struct {
					LimitRequests int64 `json:"limit_requests"`
					LimitTokens   int64 `json:"limit_tokens"`
				} `json:"upstream_reports"`
			} `json:"rules"`
		}
		if err := json.Unmarshal(b, &ex); err != nil || len(ex.Rules) != 1 {
			t.Fatalf("explain: %s", b)
		}
		r := ex.Rules[0]
		wantLimit, wantConfigured := map[bool]string{true: "50", false: "100"}[adapt], map[bool]string{true: "100", false: ""}[adapt]
		if r.Upstream == nil || r.Upstream.LimitRequests != 50 || r.Upstream.LimitTokens != 30_000 || r.Limit != wantLimit || r.ConfiguredLimit != wantConfigured {
			t.Fatalf("adapt %v: explain shows %s; want the limit %s in force (configured %q) beside the upstream's 50", adapt, b, wantLimit, wantConfigured)
		}
	}
}

// The YAML examples of docs/design/instead-of-refusing.md are the
// configurations these tests run, word for word (the headers example with
// adapt on and a placeholder upstream).
func TestInsteadOfRefusingExamplesAreTested(t *testing.T) {
	page, err := os.ReadFile("../docs/design/instead-of-refusing.md")
	if err != nil {
		t.Fatal(err)
	}
	tested := map[string]string{
		"compatConfig":    compatConfig,
		"downgradeConfig": downgradeConfig,
		"headersConfig":   strings.NewReplacer("UPSTREAM", "http://127.0.0.1:9999", "ADAPT", "true").Replace(headersConfig),
	}
	blocks := strings.Split(string(page), "```yaml\n")[1:]
	if len(blocks) != len(tested) {
		t.Fatalf("the page has %d YAML examples, the tests %d configurations", len(blocks), len(tested))
	}
	for i, b := range blocks {
		b, _, _ = strings.Cut(b, "```")
		found := false
		for name, cfg := range tested {
			if strings.TrimSpace(cfg) == strings.TrimSpace(b) {
				found = true
				delete(tested, name)
			}
		}
		if !found {
			t.Errorf("YAML example %d of the page is no test's configuration:\n%s", i+1, b)
		}
	}
}
