package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	openaip "github.com/tollgate/tollgate/providers/openai"
)

// trustGateway is a gateway on DynamoDB Local with its own clock, in
// front of two OpenAI-style upstreams A and B behind the alias "smart".
type trustGateway struct {
	h       *proxy.Handler
	srv     *httptest.Server
	limiter *limiter.Limiter
	clock   *fakeClock
}

func newTrustGateway(t *testing.T, prefix string, a, b *fakeUpstream, clock *fakeClock, rules []limiter.Rule, mod ...func(*proxy.Config)) *trustGateway {
	t.Helper()
	store, err := dynamostore.New(dynamostore.Options{API: dynamotest.Client(t, dynamostore.ClientOptions{}), TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := limiter.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	pa, _ := openaip.New(openaip.Config{Name: "A", BaseURL: a.URL + "/v1", APIKey: "k"})
	pb, _ := openaip.New(openaip.Config{Name: "B", BaseURL: b.URL + "/v1", APIKey: "k"})
	cat, err := providers.NewCatalog([]providers.Provider{pa, pb}, []providers.Alias{{Name: "smart", Strategy: providers.Failover,
		Targets: []providers.AliasTarget{{Target: "A/gpt-4o"}, {Target: "B/gpt-4o"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{Limiter: l, Catalog: cat, Cooldowns: store, Now: clock.Now}
	for _, m := range mod {
		m(&cfg)
	}
	h, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &trustGateway{h: h, limiter: l, clock: clock, srv: httptest.NewServer(h)}
	t.Cleanup(g.srv.Close)
	return g
}

func (g *trustGateway) chat(t *testing.T, model, path string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Tollgate-User-Path", path)
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w
}

// exhaust charges a target's rules without calling its upstream.
func (g *trustGateway) exhaust(t *testing.T, provider string, n int) {
	t.Helper()
	for i := range n {
		d, err := g.limiter.Admit(context.Background(), g.clock.Now(), limiter.Request{
			ID: fmt.Sprintf("pre-%s-%d-%d", provider, g.clock.Now().UnixNano(), i), Subject: limiter.Subject{UserPath: "/", Provider: provider, Model: "gpt-4o"},
		})
		if err != nil || !d.Allowed {
			t.Fatalf("pre-charging %s: %v %v", provider, err, d.Refused)
		}
	}
}

// A saturated provider is an unavailable target: the alias serves from
// the other and never calls it; with both saturated the client gets the
// sooner Retry-After; a user-path breach is 429 whatever the targets.
func TestSaturatedTargets(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	a := newUpstream(t, replay(t, "openai_chat.json", 200))
	b := newUpstream(t, replay(t, "openai_chat.json", 200))
	clock := &fakeClock{t: time.Now().Truncate(time.Hour).Add(10 * time.Second)}
	rules := []limiter.Rule{
		{Scope: limiter.ScopeProvider, Subject: "A", Limit: limiter.Window{Period: time.Minute, MaxRequests: 2}},
		{Scope: limiter.ScopeProvider, Subject: "B", Limit: limiter.Window{Period: 30 * time.Second, MaxRequests: 4}},
		{Scope: limiter.ScopeUserPath, Subject: "/limited", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1}},
	}
	g := newTrustGateway(t, prefix, a, b, clock, rules)
	g.exhaust(t, "A", 2)
	for i := range 4 {
		if w := g.chat(t, "smart", "/team"); w.Code != 200 || w.Header().Get("X-Tollgate-Provider") != "B" {
			t.Fatalf("request %d: %d from %q", i, w.Code, w.Header().Get("X-Tollgate-Provider"))
		}
	}
	if a.calls.Load() != 0 || b.calls.Load() != 4 {
		t.Fatalf("A called %d times, B %d; want 0 and 4", a.calls.Load(), b.calls.Load())
	}
	// Both saturated: the sooner of the two waits.
	waitOf := func(provider string) time.Duration {
		d, err := g.limiter.Admit(context.Background(), clock.Now(), limiter.Request{ID: "probe-" + provider,
			Subject: limiter.Subject{UserPath: "/", Provider: provider, Model: "gpt-4o"}})
		if err != nil || d.Allowed {
			t.Fatalf("%s is not saturated", provider)
		}
		return d.Refused.RetryAfter
	}
	wa, wb := waitOf("A"), waitOf("B")
	if wa == wb {
		t.Fatalf("the two waits are equal (%v); the test would prove nothing", wa)
	}
	w := g.chat(t, "smart", "/team")
	want := min(wa, wb)
	if w.Code != 429 || w.Header().Get("Retry-After") != strconv.FormatInt(int64((want+time.Second-1)/time.Second), 10) ||
		w.Header().Get("Retry-After-Ms") != strconv.FormatInt(int64((want+time.Millisecond-1)/time.Millisecond), 10) {
		t.Fatalf("both saturated: %d Retry-After %q (ms %q); want the sooner of %v and %v",
			w.Code, w.Header().Get("Retry-After"), w.Header().Get("Retry-After-Ms"), wa, wb)
	}
	if a.calls.Load() != 0 || b.calls.Load() != 4 {
		t.Fatal("a saturated target was called")
	}
	// The alias still resolves and is listed.
	if !strings.Contains(g.models(t), `"smart"`) {
		t.Fatal("a saturated alias left /v1/models")
	}

	// A user-path breach refuses even with spare targets.
	clock.Add(2 * time.Minute)
	if w := g.chat(t, "smart", "/limited"); w.Code != 200 {
		t.Fatalf("first /limited request: %d", w.Code)
	}
	before := a.calls.Load() + b.calls.Load()
	w = g.chat(t, "smart", "/limited")
	if w.Code != 429 || w.Header().Get("X-Tollgate-Rule") != "user_path:/limited:minute" || a.calls.Load()+b.calls.Load() != before {
		t.Fatalf("user-path breach: %d rule %q", w.Code, w.Header().Get("X-Tollgate-Rule"))
	}
}

func (g *trustGateway) models(t *testing.T) string {
	r := httptest.NewRequest("GET", "/v1/models", nil)
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w.Body.String()
}

// An upstream 429 with retry-after: 7 from target A puts A in a cooldown
// kept in DynamoDB: another gateway instance sends the next requests to B
// until the 7 s are over (clocks stepped, not slept).
func TestUpstream429CooldownAcrossInstances(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	var mu sync.Mutex
	throttle := true
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		t429 := throttle
		throttle = false
		mu.Unlock()
		if t429 {
			replay(t, "openai_error_429.json", 429, "Retry-After", "7")(w, r)
			return
		}
		replay(t, "openai_chat.json", 200)(w, r)
	})
	b := newUpstream(t, replay(t, "openai_chat.json", 200))
	start := time.Now().Truncate(time.Second)
	one := newTrustGateway(t, prefix, a, b, &fakeClock{t: start}, nil)
	two := newTrustGateway(t, prefix, a, b, &fakeClock{t: start}, nil)

	if w := one.chat(t, "smart", "/"); w.Code != 200 || w.Header().Get("X-Tollgate-Provider") != "B" {
		t.Fatalf("after A's 429 the request must fail over to B: %d %q", w.Code, w.Header().Get("X-Tollgate-Provider"))
	}
	if a.calls.Load() != 1 {
		t.Fatalf("A called %d times", a.calls.Load())
	}
	for _, at := range []time.Duration{time.Second, 6*time.Second + 900*time.Millisecond} {
		two.clock.t = start.Add(at)
		if w := two.chat(t, "smart", "/"); w.Code != 200 || w.Header().Get("X-Tollgate-Provider") != "B" {
			t.Fatalf("instance two at +%v: %d from %q, want B", at, w.Code, w.Header().Get("X-Tollgate-Provider"))
		}
	}
	if a.calls.Load() != 1 {
		t.Fatalf("A was called during its cooldown (%d calls)", a.calls.Load())
	}
	two.clock.t = start.Add(7 * time.Second)
	if w := two.chat(t, "smart", "/"); w.Code != 200 || w.Header().Get("X-Tollgate-Provider") != "A" {
		t.Fatalf("after the cooldown A serves again: %d from %q", w.Code, w.Header().Get("X-Tollgate-Provider"))
	}

	// A direct request to a cooling target with no other is an honest 429.
	a2 := newUpstream(t, replay(t, "openai_error_429.json", 429, "Retry-After", "30"))
	three := newTrustGateway(t, dynamotest.Prefix(t), a2, b, &fakeClock{t: start}, nil)
	if w := three.chat(t, "A/gpt-4o", "/"); w.Code != 429 || w.Header().Get("X-Tollgate-Decision") != "upstream_rate_limited" || w.Header().Get("Retry-After") != "30" {
		t.Fatalf("relayed upstream 429: %d %v", w.Code, w.Header())
	}
	three.clock.Add(10 * time.Second)
	w := three.chat(t, "A/gpt-4o", "/")
	if w.Code != 429 || w.Header().Get("X-Tollgate-Rule") != "cooldown:A/gpt-4o" || w.Header().Get("Retry-After") != "20" || a2.calls.Load() != 1 {
		t.Fatalf("cooling target: %d rule %q Retry-After %q, %d calls", w.Code, w.Header().Get("X-Tollgate-Rule"), w.Header().Get("Retry-After"), a2.calls.Load())
	}
}

// Each protocol's 429 is a rate-limit error to that protocol's own SDK
// (Gemini's, which has no Go SDK here, field by field).
func TestRefusalsParseInEachSDK(t *testing.T) {
	g := newSDKGateway(t, []providers.Provider{newCountingMock("mock")}, nil,
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1}})
	ctx := context.Background()
	oc := openAIClient(g)
	if _, err := oc.Chat.Completions.New(ctx, userMessage("first")); err != nil {
		t.Fatal(err)
	}
	_, err := oc.Chat.Completions.New(ctx, userMessage("second"))
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != 429 || oerr.Type != "rate_limit_error" || oerr.Code != "rate_limit_exceeded" ||
		!strings.Contains(oerr.Message, "minute request limit of 1 reached") {
		t.Fatalf("openai-go: %v", err)
	}

	ac := anthropicClient(g)
	_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-x", MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != 429 || aerr.Type() != "rate_limit_error" || !strings.Contains(aerr.Message, "limit of 1") {
		t.Fatalf("anthropic-sdk-go: %v", err)
	}
	if aerr.Response.Header.Get("Retry-After") == "" {
		t.Fatal("Anthropic 429 without Retry-After")
	}

	status, hdr, body := post(t, g.URL+"/v1beta/models/gemini-2.0-flash:generateContent", "application/json",
		`{"contents":[{"parts":[{"text":"hi"}]}]}`)
	var ge struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
			Details []struct {
				Type       string            `json:"@type"`
				RetryDelay string            `json:"retryDelay"`
				Reason     string            `json:"reason"`
				Metadata   map[string]string `json:"metadata"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &ge); err != nil {
		t.Fatal(err)
	}
	e := ge.Error
	if status != 429 || e.Code != 429 || e.Status != "RESOURCE_EXHAUSTED" || !strings.Contains(e.Message, "limit of 1") || len(e.Details) != 2 {
		t.Fatalf("Gemini 429: %d %s", status, body)
	}
	if e.Details[0].Type != "type.googleapis.com/google.rpc.RetryInfo" || e.Details[0].RetryDelay != hdr.Get("Retry-After")+"s" {
		t.Fatalf("RetryInfo %+v vs Retry-After %q", e.Details[0], hdr.Get("Retry-After"))
	}
	if e.Details[1].Type != "type.googleapis.com/google.rpc.ErrorInfo" || e.Details[1].Metadata["gateway_decision"] != "local_reject" {
		t.Fatalf("ErrorInfo %+v", e.Details[1])
	}
}

// A short Retry-After can be waited out instead of answered (per route),
// and a request refused for its token reservation can go with a lower
// output cap, announced in a header.
func TestWaitAndClamp(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	a := newUpstream(t, replay(t, "openai_chat.json", 200))
	b := newUpstream(t, replay(t, "openai_chat.json", 200))
	clock := &fakeClock{t: time.Now().Truncate(time.Hour).Add(59 * time.Second)}
	var slept []time.Duration
	g := newTrustGateway(t, prefix, a, b, clock, []limiter.Rule{
		{Scope: limiter.ScopeUserPath, Subject: "/wait", Limit: limiter.Window{Period: 2 * time.Second, MaxRequests: 1}},
		{Scope: limiter.ScopeUserPath, Subject: "/clamp", Limit: limiter.Window{Period: time.Minute, MaxTokens: 400}},
	}, func(c *proxy.Config) {
		c.Classes = map[string]time.Duration{"standard": 5 * time.Second}
		c.DefaultClass = "standard" // the operator's opt-in: requests naming no class wait too
		c.ClampFloor = 100
		c.Sleep = func(_ context.Context, d time.Duration) error { slept = append(slept, d); clock.Add(d); return nil }
	})
	if w := g.chat(t, "A/gpt-4o", "/wait"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	if w := g.chat(t, "A/gpt-4o", "/wait"); w.Code != 200 || len(slept) != 1 || slept[0] > 5*time.Second {
		t.Fatalf("a short wait was not waited out: %d, slept %v", w.Code, slept)
	}

	// /clamp: 400 tokens a minute. The first request reserves prompt + 8.
	if w := g.chat(t, "A/gpt-4o", "/clamp"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"model":"A/gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":1000}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Tollgate-User-Path", "/clamp")
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	clamped, _ := strconv.ParseInt(w.Header().Get(proxy.HeaderClamped), 10, 64)
	if w.Code != 200 || clamped < 100 || clamped >= 400 {
		t.Fatalf("clamp: %d, clamped to %q", w.Code, w.Header().Get(proxy.HeaderClamped))
	}
	var sent struct {
		MaxTokens int64 `json:"max_tokens"`
	}
	_ = json.Unmarshal(a.last(t).Body, &sent)
	if sent.MaxTokens != clamped {
		t.Fatalf("upstream got max_tokens %d, header says %d", sent.MaxTokens, clamped)
	}
}
