package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
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
				if target == "openai/small" && (tg.Capabilities.ContextWindow != 8192 || tg.Capabilities.Tools != "no") {
					t.Fatalf("explain shows small's capabilities as %+v, want its declared 8192 tokens and no tools", tg.Capabilities)
				}
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
		// The dashboard's provider view reads the same report.
		_, b = in.call(t, "GET", "/admin/providers", master, "")
		var pv struct {
			Providers []struct {
				Name    string `json:"name"`
				Reports map[string]struct {
					LimitRequests int64 `json:"limit_requests"`
				} `json:"upstream_reports"`
			} `json:"providers"`
		}
		if err := json.Unmarshal(b, &pv); err != nil || len(pv.Providers) != 1 || pv.Providers[0].Reports["*"].LimitRequests != 50 {
			t.Fatalf("adapt %v: GET /admin/providers: %s; want openai's report of 50 requests a minute", adapt, b)
		}
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
		"migrationConfig": migrationConfig,
		"streamsConfig":   strings.ReplaceAll(streamsConfig, "UPSTREAM", "http://127.0.0.1:9999"),
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

// streamsConfig bounds the streams of class interactive to a second, caps
// those of class batch at their reservation, and lets one request of the
// team run at a time.
const streamsConfig = `
providers:
  - {name: openai, type: compatible, base_url: UPSTREAM/v1}
gateway:
  default_max_tokens: 50
shaping:
  classes:
    interactive: {max_stream_duration: 1s}
    batch: {cut_at_reservation: true}
rate_limits:
  user_paths:
    - path: /team
      limits: [{period: concurrent, max_requests: 1}]
    - path: /live
      limits: [{max_streams: 1, max_stream_duration: 1s}]
`

// A stream past its class's max_stream_duration ends with the protocol's
// own error event after what was sent, and its slot is back at once: the
// next request of a team allowed one at a time is admitted. A batch
// stream with cut_at_reservation is sent upstream capped at its
// reservation, and the answer says so.
func TestStreamsEndAtTheirDuration(t *testing.T) {
	t.Parallel() // waits in real time on its own tables, upstream and instance; see docs/testing.md
	up := slowStreams(t)
	in := newInstance(t, dynamotest.Prefix(t), time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		config.Env{"OPENAI_API_KEY": "k", "TOLLGATE_CONFIG": writeConfig(t, strings.ReplaceAll(streamsConfig, "UPSTREAM", up.URL))})
	const body = `{"model":"openai/gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	streamEndsAfterASecond(t, in, body, "X-Tollgate-User-Path", "/team/a", "X-Tollgate-Class", "interactive")
	// Its slot is back: a request of the same team, one at a time, goes.
	next := in.do(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/team/b", "X-Tollgate-Class", "batch")
	b, _ := io.ReadAll(next.Body)
	next.Body.Close()
	if next.StatusCode != 200 {
		t.Fatalf("the next request of the team: %d %s; the cut stream's slot is not back", next.StatusCode, b)
	}
	if c := next.Header.Get("X-Tollgate-Max-Tokens-Clamped"); c != "50" {
		t.Fatalf("a stream capped at its reservation says X-Tollgate-Max-Tokens-Clamped %q, want 50", c)
	}
	var sent struct {
		MaxTokens int64 `json:"max_tokens"`
	}
	if err := json.Unmarshal(up.last(t).Body, &sent); err != nil || sent.MaxTokens != 50 {
		t.Fatalf("a batch stream with cut_at_reservation went upstream with max_tokens %d, want its reservation 50", sent.MaxTokens)
	} // Explain says both, as a stream.
	for _, c := range []struct {
		body           string
		stream, capped int64
	}{
		{`{"user_path":"/team/a","model":"openai/gpt-4o","class":"interactive","stream":true}`, 1000, 0},
		{`{"user_path":"/team/b","model":"openai/gpt-4o","class":"batch","stream":true}`, 0, 50},
		{`{"user_path":"/team/b","model":"openai/gpt-4o","class":"batch"}`, 0, 0},
	} {
		_, b := in.call(t, "POST", "/admin/explain", master, c.body)
		var ex struct {
			Decision struct {
				MaxStreamMS int64 `json:"max_stream_duration_ms"`
				ClampedTo   int64 `json:"clamped_to"`
			} `json:"decision"`
		}
		if err := json.Unmarshal(b, &ex); err != nil || ex.Decision.MaxStreamMS != c.stream || ex.Decision.ClampedTo != c.capped {
			t.Fatalf("explain %s: %s; want max_stream_duration_ms %d and clamped_to %d", c.body, b, c.stream, c.capped)
		}
	}
}

// max_streams: 1 counts streams apart: with one stream running, a second
// is refused by the streams rule, a request that does not stream is not;
// the rule's max_stream_duration ends the first, and then another stream
// goes.
func TestMaxStreamsCountsStreamsOnly(t *testing.T) {
	up := slowStreams(t)
	in := newInstance(t, dynamotest.Prefix(t), time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		config.Env{"OPENAI_API_KEY": "k", "TOLLGATE_CONFIG": writeConfig(t, strings.ReplaceAll(streamsConfig, "UPSTREAM", up.URL))})
	const stream = `{"model":"openai/gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	first := make(chan struct{})
	go func() {
		defer close(first)
		streamEndsAfterASecond(t, in, stream, "X-Tollgate-User-Path", "/live/a")
	}()
	deadline := time.Now().Add(5 * time.Second)
	for up.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // until the first stream is upstream
	}
	res := in.do(t, "POST", "/v1/chat/completions", master, stream, "X-Tollgate-User-Path", "/live/b")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 429 || res.Header.Get("X-Tollgate-Rule") != "user_path:/live:streams" {
		t.Fatalf("a second stream while one runs: %d by %q, want 429 by user_path:/live:streams", res.StatusCode, res.Header.Get("X-Tollgate-Rule"))
	}
	if s, b := in.call(t, "POST", "/v1/chat/completions", master, strings.Replace(stream, `"stream":true`, `"stream":false`, 1),
		"X-Tollgate-User-Path", "/live/c"); s != 200 {
		t.Fatalf("a request that does not stream, while a stream runs: %d %s", s, b)
	}
	<-first
	if s, _ := in.call(t, "POST", "/v1/chat/completions", master, strings.Replace(stream, `"stream":true`, `"stream":true,"max_tokens":2`, 1),
		"X-Tollgate-User-Path", "/live/b"); s != 200 {
		t.Fatalf("a stream after the first ended: %d", s)
	}
}

// streamEndsAfterASecond sends a stream that the upstream would keep up
// for 10 s and checks that the gateway ends it after about a second with
// OpenAI's error chunk and [DONE].
func streamEndsAfterASecond(t *testing.T, in *instance, body string, hdr ...string) {
	t.Helper()
	started := time.Now()
	res := in.do(t, "POST", "/v1/chat/completions", master, body, hdr...)
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	took := time.Since(started)
	events := splitEvents(got)
	if res.StatusCode != 200 || len(events) < 3 {
		t.Errorf("the stream: %d, %d events: %s", res.StatusCode, len(events), got)
		return
	}
	last, end := events[len(events)-2], events[len(events)-1]
	var e struct {
		Error struct{ Code, Type, Message string } `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(bytes.TrimPrefix(last, []byte("data: "))), &e); err != nil ||
		e.Error.Code != "stream_duration_exceeded" || string(bytes.TrimSpace(end)) != "data: [DONE]" {
		t.Errorf("the stream does not end with an error chunk and [DONE]: %q then %q", last, end)
	}
	if took < time.Second || took > 5*time.Second {
		t.Errorf("the stream ended after %v, want about its 1s", took)
	}
	if !strings.Contains(in.logs.String(), `"msg":"stream ended at its max_stream_duration"`) {
		t.Error("the cut is not logged")
	}
}

// slowStreams is an upstream whose streams last 10 s (50 chunks, 200 ms
// apart) unless capped, when they end after 2 chunks, and which answers
// a request that does not stream at once.
func slowStreams(t *testing.T) *fakeUpstream {
	chunk := []byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	answer := replay(t, "openai_chat.json", 200)
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		n := 50 // 10 s at most: the gateway ends it after 1
		if bytes.Contains(body, []byte(`"max_tokens"`)) {
			n = 2 // capped: it ends at its cap
		}
		for range n {
			if _, err := w.Write(chunk); err != nil || r.Context().Err() != nil {
				return
			}
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	})
}

// A downgrade set through the admin API is one the configuration could
// have had: set on one instance, the other follows within the
// rule-propagation bound; listed beside the configuration's; removed, the
// batch request gets its 429 again.
func TestDowngradeThroughTheAdminAPI(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cfg := writeConfig(t, downgradeConfig[:strings.Index(downgradeConfig, "downgrade:")])
	a := newInstance(t, prefix, t0, config.Env{"TOLLGATE_CONFIG": cfg})
	b := newInstance(t, prefix, t0, config.Env{"TOLLGATE_CONFIG": cfg})
	const body = `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`
	for i := range 3 { // $0.009 of the team's $0.01 reserved
		if s, out := a.call(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/team/a"); s != 200 {
			t.Fatalf("request %d: %d %s", i, s, out)
		}
	}
	batch := func(in *instance) (int, string) {
		res := in.do(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/team/a", "X-Tollgate-Class", "batch")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header.Get("X-Tollgate-Downgraded-From")
	}
	if s, from := batch(b); s != 429 || from != "" {
		t.Fatalf("before any downgrade: %d, downgraded from %q; want the 429", s, from)
	}
	for _, c := range []struct{ body, field string }{
		{`{"from":"openai/gpt-4o","to":"openai/gpt-4o-mini","when":{"refused":true},"classes":["nightly"]}`, "classes"},
		{`{"from":"openai/gpt-4o","to":"nowhere/model","when":{"refused":true},"classes":["batch"]}`, "to"},
		{`{"from":"openai/gpt-4o","to":"openai/gpt-4o-mini","classes":["batch"]}`, "when"},
	} {
		if s, out := a.call(t, "POST", "/admin/downgrades", master, c.body); s != 400 || !strings.Contains(string(out), `"`+c.field+`"`) {
			t.Fatalf("POST %s: %d %s; want 400 naming %s", c.body, s, out, c.field)
		}
	}
	const set = `{"from":"openai/gpt-4o","to":"openai/gpt-4o-mini","when":{"refused":true},"classes":["batch","background"]}`
	if s, out := a.call(t, "POST", "/admin/downgrades", master, set); s != 201 {
		t.Fatalf("POST /admin/downgrades: %d %s", s, out)
	}
	b.clock.Add(6 * time.Second) // past the watcher's interval
	if s, from := batch(b); s != 200 || from != "openai/gpt-4o" {
		t.Fatalf("with the downgrade, on the other instance: %d, downgraded from %q", s, from)
	}
	if s, out := a.call(t, "GET", "/admin/downgrades", master, ""); s != 200 || !strings.Contains(string(out), `"source":"manual"`) || !strings.Contains(string(out), `"to":"openai/gpt-4o-mini"`) {
		t.Fatalf("GET /admin/downgrades: %d %s", s, out)
	}
	if s, out := a.call(t, "DELETE", "/admin/downgrades", master, `{"from":"openai/gpt-4o","to":"openai/gpt-4o-mini"}`); s != 200 {
		t.Fatalf("DELETE /admin/downgrades: %d %s", s, out)
	}
	b.clock.Add(6 * time.Second)
	if s, from := batch(b); s != 429 || from != "" {
		t.Fatalf("after the delete: %d, downgraded from %q; want the 429", s, from)
	}
}
