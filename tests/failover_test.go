package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	openaip "github.com/tollgate/tollgate/providers/openai"
)

// A virtual model fails over on an upstream 5xx or timeout to its next
// target; the target that served is the one its tokens are charged to.
func TestFailoverOn5xxAndTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		primary http.HandlerFunc
		timeout time.Duration
	}{
		{"5xx", replay(t, "openai_error_500.json", 500), 0},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			select { // answers too late for the provider's timeout
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			primary := newUpstream(t, tc.primary)
			secondary := newUpstream(t, replay(t, "openai_chat.json", 200))
			a, err := openaip.New(openaip.Config{Name: "primary", BaseURL: primary.URL + "/v1", APIKey: "k", Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			b, err := openaip.New(openaip.Config{Name: "secondary", BaseURL: secondary.URL + "/v1", APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			rules := []limiter.Rule{
				{Scope: limiter.ScopeProvider, Subject: "primary", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1000, MaxTokens: 1 << 30}},
				{Scope: limiter.ScopeProvider, Subject: "secondary", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1000, MaxTokens: 1 << 30}},
			}
			g := newSDKGateway(t, []providers.Provider{a, b}, []providers.Alias{{Name: "smart", Strategy: providers.Failover,
				Targets: []providers.AliasTarget{{Target: "primary/gpt-4o"}, {Target: "secondary/gpt-4o-mini"}}}}, rules...)
			params := userMessage("Hello")
			params.Model = "smart"
			c := openAIClient(g)
			resp, err := c.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Choices[0].Message.Content != "Hello! How can I assist you today?" {
				t.Fatalf("answer %+v", resp.Choices)
			}
			if primary.calls.Load() != 1 || secondary.calls.Load() != 1 {
				t.Fatalf("calls: primary %d, secondary %d; want 1 and 1", primary.calls.Load(), secondary.calls.Load())
			}
			if m := secondarySentModel(t, secondary); m != "gpt-4o-mini" {
				t.Fatalf("the secondary was asked for %q", m)
			}
			// The served request settled on the secondary: its window holds
			// exactly the upstream's usage after reconciliation.
			g.lastUsage(t, 2)
			reconcileAll(t, g)
			usage := map[string]limiter.DimensionUsage{}
			us, _ := g.limiter.AllUsage(ctx, time.Now())
			for _, u := range us {
				for _, d := range u.Dimensions {
					usage[u.Rule.Subject+"/"+d.Kind.String()] = d
				}
			}
			if got := usage["secondary/tok"].Used; got != 29 {
				t.Errorf("secondary's tokens %d, want the 29 it served", got)
			}
			wantPrimary := int64(0) // a 5xx used nothing: refunded
			if tc.name == "timeout" {
				// A timed-out call may have used tokens upstream: its
				// reservation (estimate + max_tokens) is kept, never refunded.
				wantPrimary = g.recorded()[0].Lease.Reserved.Total()
			}
			if got := usage["primary/tok"].Used; got != wantPrimary {
				t.Errorf("primary's tokens %d, want %d", got, wantPrimary)
			}
			if usage["primary/req"].Used != 1 || usage["secondary/req"].Used != 1 {
				t.Errorf("each provider was called once and charged one request: %+v %+v", usage["primary/req"], usage["secondary/req"])
			}
		})
	}
}

func secondarySentModel(t *testing.T, u *fakeUpstream) string {
	t.Helper()
	var b struct {
		Model string `json:"model"`
	}
	_ = jsonUnmarshal(u.last(t).Body, &b)
	return b.Model
}

func reconcileAll(t *testing.T, g *sdkGateway) {
	t.Helper()
	evs := g.recorded()
	var ss []limiter.Settlement
	for _, e := range evs {
		ss = append(ss, limiter.Settlement{Lease: e.Lease, Used: e.Used})
	}
	if _, err := g.store.Settle(context.Background(), ss); err != nil {
		t.Fatal(err)
	}
}

// A client that goes away mid-stream frees its slot, and what the stream
// delivered until then is recorded as partial usage.
func TestMidStreamDisconnect(t *testing.T) {
	up := newUpstream(t, replaySSE(t, "openai_chat_stream.sse", 30*time.Millisecond))
	p, err := openaip.New(openaip.Config{Name: "openai", BaseURL: up.URL + "/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	rules := []limiter.Rule{
		{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 1}},
		{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: time.Minute, MaxTokens: 1 << 30}},
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil, rules...)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() && events < 3 {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	cancel() // the client leaves after three chunks
	resp.Body.Close()

	used := g.lastUsage(t, 1)
	if used.Exact || used.OutputTokens < 1 || used.OutputTokens >= 8 || used.InputTokens == 0 {
		t.Fatalf("partial usage %+v: want inexact, some output but not all 8 tokens, the prompt counted", used)
	}
	// The slot is free: the next request is admitted.
	up.serve = replay(t, "openai_chat.json", 200)
	c := openAIClient(g)
	if _, err := c.Chat.Completions.New(context.Background(), userMessage("again")); err != nil {
		t.Fatalf("slot not released after the disconnect: %v", err)
	}
	// Partial usage never refunds the reservation.
	reconcileAll(t, g)
	us, _ := g.limiter.AllUsage(context.Background(), time.Now())
	for _, u := range us {
		if _, gauge := u.Rule.Limit.(limiter.Gauge); gauge && u.Dimensions[0].Used != 0 {
			t.Fatalf("in flight %d after both finished", u.Dimensions[0].Used)
		}
	}
}

// An upstream that never answers is the gateway's 504 once the
// provider's timeout has passed (not a 502: it was reached, and went
// silent), in the protocol's error shape, and its reservation is kept.
func TestSilentUpstreamIs504(t *testing.T) {
	silent := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	p, err := openaip.New(openaip.Config{Name: "openai", BaseURL: silent.URL + "/v1", APIKey: "k", Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g := newSDKGateway(t, []providers.Provider{p}, nil)
	resp, err := http.Post(g.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":10}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusGatewayTimeout || e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "no answer's headers for 100ms") {
		t.Fatalf("%d %+v; want 504 saying the upstream sent nothing within its timeout", resp.StatusCode, e.Error)
	}
	// Not exact: the call may have used tokens upstream, so settlement
	// keeps the reservation (TestFailoverOn5xxAndTimeout settles one).
	if got := g.recorded(); len(got) != 1 || got[0].Used.Exact {
		t.Errorf("recorded %+v; want the silent call's completion, its usage not exact", got)
	}
}
