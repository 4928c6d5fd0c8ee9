package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
)

var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// counting wraps a provider and counts the calls that reach it.
type counting struct {
	providers.Provider
	calls atomic.Int64
}

func (c *counting) Serve(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	c.calls.Add(1)
	return c.Provider.Serve(ctx, w, r)
}

func (c *counting) AcceptsAnyModel() bool { return true }

type fixture struct {
	h        *proxy.Handler
	upstream *counting
	store    *memstore.Store
	now      time.Time
}

func newFixture(t *testing.T, master string, rules ...limiter.Rule) *fixture {
	t.Helper()
	return newFixtureTB(t, master, rules...)
}

func newFixtureTB(t testing.TB, master string, rules ...limiter.Rule) *fixture {
	t.Helper()
	f := &fixture{store: memstore.New(), now: t0.Add(10 * time.Second)}
	rs, err := limiter.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: f.store, Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	f.upstream = &counting{Provider: mock.New("mock", 0)}
	cat, err := providers.NewCatalog([]providers.Provider{f.upstream}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.h, err = proxy.New(proxy.Config{
		Limiter:      l,
		Catalog:      cat,
		MasterKey:    master,
		MaxBodyBytes: 4096,
		Now:          func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) do(method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

const chatBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hello"}],"max_tokens":5}`

type openAIError struct {
	Error struct {
		Message         string  `json:"message"`
		Type            string  `json:"type"`
		Code            *string `json:"code"`
		Param           *string `json:"param"`
		GatewayDecision string  `json:"gateway_decision"`
	} `json:"error"`
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) openAIError {
	t.Helper()
	var e openAIError
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", w.Body.String(), err)
	}
	return e
}

func TestChatThroughMock(t *testing.T) {
	f := newFixture(t, "", limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 10, MaxTokens: 1000}})
	w := f.do("POST", "/v1/chat/completions", chatBody, map[string]string{"X-Tollgate-User-Path": "/team/app"})
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var resp struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 5 || resp.Usage.PromptTokens <= 0 || len(resp.Choices) != 1 {
		t.Fatalf("mock answer %s", w.Body)
	}
	h := w.Header()
	for k, want := range map[string]string{
		"X-Ratelimit-Limit-Requests":     "10",
		"X-Ratelimit-Remaining-Requests": "9",
		"X-Ratelimit-Reset-Requests":     "1m50s",
		"X-Ratelimit-Limit-Tokens":       "1000",
		"X-Tollgate-Provider":            "mock",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	// The reservation is the estimate plus max_tokens.
	reserved := resp.Usage.PromptTokens + 5
	if got := h.Get("X-Ratelimit-Remaining-Tokens"); got != itoa(1000-reserved) {
		t.Errorf("remaining tokens %s, want %d", got, 1000-reserved)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestRateLimited429(t *testing.T) {
	f := newFixture(t, "", limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/team/alpha", Limit: limiter.Window{Period: limiter.Minute, MaxRequests: 2}})
	hdr := map[string]string{"X-Tollgate-User-Path": "/team/alpha"}
	for range 2 {
		if w := f.do("POST", "/v1/chat/completions", chatBody, hdr); w.Code != 200 {
			t.Fatalf("status %d", w.Code)
		}
	}
	w := f.do("POST", "/v1/chat/completions", chatBody, hdr)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	e := decodeError(t, w)
	if e.Error.Type != "rate_limit_error" || e.Error.Code == nil || *e.Error.Code != "rate_limit_exceeded" || e.Error.Param != nil ||
		e.Error.Message != "rate limit exceeded for /team/alpha: minute request limit of 2 reached" ||
		e.Error.GatewayDecision != "local_reject" {
		t.Fatalf("429 body %s", w.Body)
	}
	h := w.Header()
	// 10 s into the window, 2 of 2 used: admitted once the next window's
	// estimate 2·(1−e/60) drops to 1, at e = 30 s: 80 s from now.
	for k, want := range map[string]string{
		"Retry-After":                    "80",
		"Retry-After-Ms":                 "80000",
		"X-Ratelimit-Limit-Requests":     "2",
		"X-Ratelimit-Remaining-Requests": "0",
		"X-Ratelimit-Reset-Requests":     "1m50s",
		"X-Tollgate-Decision":            "local_reject",
		"X-Tollgate-Rule":                "user_path:/team/alpha:minute",
		"X-Should-Retry":                 "false", // over 60 s: SDKs would not wait that long
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if f.upstream.calls.Load() != 2 {
		t.Fatalf("upstream called %d times, want 2", f.upstream.calls.Load())
	}
	// At Retry-After − 1 s: still refused. At Retry-After: admitted.
	f.now = f.now.Add(79 * time.Second)
	if w := f.do("POST", "/v1/chat/completions", chatBody, hdr); w.Code != 429 {
		t.Fatalf("at Retry-After−1s: status %d, want 429", w.Code)
	}
	f.now = f.now.Add(time.Second)
	if w := f.do("POST", "/v1/chat/completions", chatBody, hdr); w.Code != 200 {
		t.Fatalf("at Retry-After: status %d, want 200", w.Code)
	}
}

func TestLongWaitSaysDoNotRetry(t *testing.T) {
	f := newFixture(t, "", limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: limiter.Day, MaxRequests: 1}})
	f.do("POST", "/v1/chat/completions", chatBody, nil)
	w := f.do("POST", "/v1/chat/completions", chatBody, nil)
	if w.Code != 429 || w.Header().Get("X-Should-Retry") != "false" {
		t.Fatalf("status %d x-should-retry %q, want 429 and false", w.Code, w.Header().Get("X-Should-Retry"))
	}
}

func TestStreamingChunks(t *testing.T) {
	f := newFixture(t, "")
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	w := f.do("POST", "/v1/chat/completions", body, nil)
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d type %q", w.Code, w.Header().Get("Content-Type"))
	}
	var events []string
	sc := bufio.NewScanner(strings.NewReader(w.Body.String()))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	// role, 3 words, finish, usage, [DONE]
	if len(events) != 7 || events[6] != "[DONE]" || !strings.Contains(events[5], `"completion_tokens":3`) {
		t.Fatalf("events %q", events)
	}
}

func TestBadInputNeverReachesUpstream(t *testing.T) {
	f := newFixture(t, "")
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	tests := []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		want   string
	}{
		{"malformed JSON", `{"model":`, nil, 400, "invalid JSON body"},
		{"not an object", `[1,2]`, nil, 400, "invalid JSON body"},
		{"missing model", `{"messages":[{"role":"user","content":"x"}]}`, nil, 400, "you must provide a model parameter"},
		{"empty model", `{"model":"","messages":[{"role":"user","content":"x"}]}`, nil, 400, "you must provide a model parameter"},
		{"no messages", `{"model":"m"}`, nil, 400, "messages must be a non-empty array"},
		{"wrong content type", chatBody, map[string]string{"Content-Type": "text/plain"}, 415, "unsupported Content-Type text/plain"},
		{"too large", big, nil, 413, "larger than the gateway's limit of 4096 bytes"},
		{"bad max_tokens", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, nil, 400, "max_tokens must be an integer from 1 to 2147483647"},
		{"wrong field type", `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, nil, 400, `field "stream" has the wrong type`},
		{"bad content", `{"model":"m","messages":[{"role":"user","content":5}]}`, nil, 400, "content must be a string or an array of parts"},
		{"bad user path", chatBody, map[string]string{"X-Tollgate-User-Path": "/team/../admin"}, 400, `has a ".." segment`},
		{"empty user path segment", chatBody, map[string]string{"X-Tollgate-User-Path": "/team//x"}, 400, "has an empty segment"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := f.do("POST", "/v1/chat/completions", tc.body, tc.hdr)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if e := decodeError(t, w); !strings.Contains(e.Error.Message, tc.want) || e.Error.Type == "" {
				t.Fatalf("error %s, want a message containing %q", w.Body, tc.want)
			}
		})
	}
	if n := f.upstream.calls.Load(); n != 0 {
		t.Fatalf("upstream called %d times for bad input", n)
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t, "sk-master")
	if w := f.do("POST", "/v1/chat/completions", chatBody, nil); w.Code != 401 {
		t.Fatalf("no key: status %d, want 401", w.Code)
	}
	if w := f.do("POST", "/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer wrong"}); w.Code != 401 {
		t.Fatalf("wrong key: status %d, want 401", w.Code)
	}
	w := f.do("POST", "/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer sk-master", "X-Tollgate-User-Path": "/any/where"})
	if w.Code != 200 {
		t.Fatalf("master key: status %d: %s", w.Code, w.Body)
	}
	if f.upstream.calls.Load() != 1 {
		t.Fatal("exactly the authenticated call may reach the upstream")
	}
}

func TestUnknownRoute(t *testing.T) {
	f := newFixture(t, "")
	w := f.do("GET", "/v2/nothing", "", nil)
	if w.Code != 404 || decodeError(t, w).Error.Type == "" {
		t.Fatalf("status %d body %s", w.Code, w.Body)
	}
}

func TestConcurrencySlotReleasedAfterResponse(t *testing.T) {
	f := newFixture(t, "", limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 1}})
	for i := range 3 {
		if w := f.do("POST", "/v1/chat/completions", chatBody, nil); w.Code != 200 {
			t.Fatalf("request %d: status %d (slot not released?)", i, w.Code)
		}
	}
}
