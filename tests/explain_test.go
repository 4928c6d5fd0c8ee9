package tests

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// explainConfig serves two mock providers behind a virtual model, and an
// upstream that answers every request 429 behind another; the rules
// refuse, wait, clamp and budget.
const explainConfig = `
providers:
  - {name: a, type: mock}
  - {name: b, type: mock}
  - {name: c, type: compatible, base_url: UPSTREAM/v1}
models:
  - {name: smart, targets: [{model: a/gpt-4o}, {model: b/gpt-4o}]}
  - {name: flaky, targets: [{model: c/gpt-4o}, {model: b/gpt-4o}]}
prices:
  gpt-4o: {input: 0, output: 30}
gateway:
  clamp_max_tokens_floor: 10
budgets:
  user_paths:
    - {path: /broke, amount_usd: 0.01, period: day}
rate_limits:
  user_paths:
    - path: /tight
      limits: [{period: minute, max_requests: 1}]
    - path: /waity
      limits: [{period_seconds: 1, max_requests: 1}]
    - path: /tokens
      limits: [{period: minute, max_tokens: 150}]
  providers:
    - name: a
      limits: [{period: minute, max_requests: 2}]
`

// explained is what /admin/explain says a request gets.
type explained struct {
	Decision struct {
		Allowed      bool   `json:"allowed"`
		Status       int    `json:"status"`
		Target       string `json:"target"`
		Decision     string `json:"decision"`
		RuleID       string `json:"rule_id"`
		RetryAfterMS *int64 `json:"retry_after_ms"`
		ClampedTo    int64  `json:"clamped_to"`
		WaitedMS     int64  `json:"waited_ms"`
	} `json:"decision"`
	Targets []struct {
		Target  string `json:"target"`
		Skipped string `json:"skipped"`
		Why     string `json:"why"`
	} `json:"targets"`
}

// Explain runs the gateway's own admission in dry run: for a table of
// requests, each explained and then sent at the same instant, what
// explain says (status, x-tollgate-decision, x-tollgate-rule, the exact
// Retry-After, the target served, the clamped cap, and each target it
// skips and why) is what the request gets. Failover, a consumer rule that
// ends the pass, a provider rule, a class's wait, a clamp, a budget full
// of reservations, pauses of a provider and of a user path, and a
// cooldown after an upstream 429 are all in the table. (An upstream's own
// failure is the one thing explain cannot foresee: the step that meets
// the 429 is setup, not compared.)
func TestExplainIsWhatTheRequestGets(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit_error"}}`)
	})
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	in := newInstanceWith(t, prefix, t0, config.Env{"C_API_KEY": "k",
		"TOLLGATE_CONFIG": writeConfig(t, strings.ReplaceAll(explainConfig, "UPSTREAM", up.URL))},
		func(in *instance) {
			in.app.Sleep = func(_ context.Context, d time.Duration) error { in.clock.Add(d); return nil }
		})
	chat := func(model string, maxTokens int) string {
		cap := ""
		if maxTokens > 0 {
			cap = `,"max_tokens":` + strconv.Itoa(maxTokens)
		}
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]` + cap + `}`
	}
	type step struct {
		name, path, model string
		maxTokens         int
		class             string
		setup             func(t *testing.T) // before explaining
		status            int                // what the request gets
		skipped           string             // a skip explain must list ("a/gpt-4o paused")
	}
	pause := func(body string) func(t *testing.T) {
		return func(t *testing.T) {
			if s, b := in.call(t, "POST", "/admin/pause", master, body); s != 200 && s != 201 {
				t.Fatalf("pause: %d %s", s, b)
			}
		}
	}
	steps := []step{
		{name: "admitted at the one target", path: "/free", model: "a/gpt-4o", status: 200},
		{name: "a consumer rule's first", path: "/tight", model: "smart", status: 200},
		{name: "a consumer rule refuses: no other target can help", path: "/tight", model: "smart", status: 429},
		{name: "failover past a saturated provider", path: "/free", model: "smart", status: 200, skipped: "a/gpt-4o refused"},
		{name: "the saturated provider alone", path: "/free", model: "a/gpt-4o", status: 429},
		{name: "a window's first", path: "/waity", model: "b/gpt-4o", status: 200},
		{name: "a class waits out the window", path: "/waity", model: "b/gpt-4o", class: "standard", status: 200},
		{name: "no class: the exact 429", path: "/waity", model: "b/gpt-4o", status: 429},
		{name: "tokens: the first", path: "/tokens", model: "b/gpt-4o", maxTokens: 100, status: 200},
		{name: "tokens: the cap clamped to what is left", path: "/tokens", model: "b/gpt-4o", maxTokens: 100, status: 200},
		{name: "budget: 1", path: "/broke", model: "b/gpt-4o", maxTokens: 100, status: 200},
		{name: "budget: 2", path: "/broke", model: "b/gpt-4o", maxTokens: 100, status: 200},
		{name: "budget: 3", path: "/broke", model: "b/gpt-4o", maxTokens: 100, status: 200},
		{name: "budget full of reservations", path: "/broke", model: "b/gpt-4o", maxTokens: 100, status: 429},
		{name: "a paused provider routed around", path: "/free2", model: "smart", status: 200, skipped: "a/gpt-4o paused",
			setup: pause(`{"provider":"a","reason":"maintenance"}`)},
		{name: "a paused user path", path: "/held", model: "smart", status: 503, setup: pause(`{"user_path":"/held","reason":"audit"}`)},
		{name: "a cooling provider routed around", path: "/free", model: "flaky", status: 200, skipped: "c/gpt-4o cooling_down",
			setup: func(t *testing.T) {
				if s, _ := in.call(t, "POST", "/v1/chat/completions", master, chat("flaky", 0), "X-Tollgate-User-Path", "/setup"); s != 200 {
					t.Fatalf("the request that meets the upstream's 429 fails over to b: %d", s)
				}
			}},
		{name: "the cooling provider alone", path: "/free", model: "c/gpt-4o", status: 429},
	}
	// The gateway's estimate of the prompt, from its log line of a
	// request no rule counts.
	if s, _ := in.call(t, "POST", "/v1/chat/completions", master, chat("b/gpt-4o", 0), "X-Tollgate-User-Path", "/calibrate"); s != 200 {
		t.Fatalf("calibration request: %d", s)
	}
	input := estimateLogged(t, in.logs.String())
	for _, st := range steps {
		if st.setup != nil {
			st.setup(t)
		}
		body := `{"user_path":"` + st.path + `","model":"` + st.model + `","class":"` + st.class + `","input_tokens":` +
			strconv.FormatInt(input, 10) + `,"max_tokens":` + strconv.Itoa(st.maxTokens) + `}`
		s, b := in.call(t, "POST", "/admin/explain", master, body)
		if s != 200 {
			t.Fatalf("%s: explain %d %s", st.name, s, b)
		}
		var ex explained
		if err := json.Unmarshal(b, &ex); err != nil {
			t.Fatal(err)
		}
		hdr := []string{"X-Tollgate-User-Path", st.path}
		if st.class != "" {
			hdr = append(hdr, "X-Tollgate-Class", st.class)
		}
		res := in.do(t, "POST", "/v1/chat/completions", master, chat(st.model, st.maxTokens), hdr...)
		got := res.Header
		if res.StatusCode != st.status {
			t.Fatalf("%s: the request got %d, want %d (explain said %s)", st.name, res.StatusCode, st.status, b)
		}
		d := ex.Decision
		target := got.Get("X-Tollgate-Provider") + "/" + got.Get("X-Tollgate-Model")
		if res.StatusCode != 200 {
			target = ""
		}
		retry := int64(-1)
		if d.RetryAfterMS != nil {
			retry = *d.RetryAfterMS
		}
		gotRetry := int64(-1)
		if v := got.Get("Retry-After-Ms"); v != "" {
			gotRetry, _ = strconv.ParseInt(v, 10, 64)
		}
		clamped, _ := strconv.ParseInt(got.Get("X-Tollgate-Max-Tokens-Clamped"), 10, 64)
		if d.Status != res.StatusCode || d.Target != target || d.Decision != got.Get("X-Tollgate-Decision") ||
			d.RuleID != got.Get("X-Tollgate-Rule") || retry != gotRetry || d.ClampedTo != clamped {
			t.Fatalf("%s: explain said %d target %q decision %q rule %q retry %d ms clamp %d;\nthe request got %d target %q decision %q rule %q retry %d ms clamp %d\n%s",
				st.name, d.Status, d.Target, d.Decision, d.RuleID, retry, d.ClampedTo,
				res.StatusCode, target, got.Get("X-Tollgate-Decision"), got.Get("X-Tollgate-Rule"), gotRetry, clamped, b)
		}
		t.Logf("%s: %d target %q rule %q retry %d ms clamp %d waited %d ms", st.name, d.Status, d.Target, d.RuleID, retry, d.ClampedTo, d.WaitedMS)
		if st.skipped != "" {
			found := false
			for _, tg := range ex.Targets {
				found = found || tg.Target+" "+tg.Skipped == st.skipped
			}
			if !found {
				t.Fatalf("%s: explain does not list %q: %s", st.name, st.skipped, b)
			}
		}
		if st.class != "" && d.WaitedMS <= 0 {
			t.Fatalf("%s: explain does not say the request waits: %s", st.name, b)
		}
		if strings.Contains(st.name, "clamped") && clamped <= 0 {
			t.Fatalf("%s: not clamped: %s", st.name, b)
		}
	}
}

// estimateLogged is the estimate_input_tokens of the last "request
// finished" line of logs.
func estimateLogged(t *testing.T, logs string) int64 {
	t.Helper()
	est := int64(-1)
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Msg string `json:"msg"`
			Est *int64 `json:"estimate_input_tokens"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "request finished" && l.Est != nil {
			est = *l.Est
		}
	}
	if est < 0 {
		t.Fatal("no request finished line with estimate_input_tokens")
	}
	return est
}
