package tests

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// The engine stops mid-test (the proxy in front of it closes): with the
// failure mode closed, the gateway refuses with a clear 503 and nothing
// reaches the upstream; with open, it admits, logs and counts.
func TestStoreStoppedMidTest(t *testing.T) {
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) {
			prefix := dynamotest.Prefix(t)
			engine := startTCPProxy(t, strings.TrimPrefix(dynamotest.Endpoint(t), "http://"))
			api := dynamotest.Client(t, dynamostore.ClientOptions{
				Endpoint:    "http://" + engine.Addr(),
				MaxAttempts: 2,
				MaxBackoff:  10 * time.Millisecond,
			})
			store, err := dynamostore.New(dynamostore.Options{API: api, TablePrefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			gw := newGateway(t, gatewayOptions{
				store:    store,
				failOpen: mode == "open",
				logger:   slog.New(slog.NewJSONHandler(&logs, nil)),
				rules: []limiter.Rule{{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: time.Minute, MaxRequests: 100}},
					{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 10}}},
			})
			if w := gw.chat(t, nil); w.Code != 200 {
				t.Fatalf("with the engine up: status %d %s", w.Code, w.Body)
			}
			engine.Stop()
			before := gw.upstream.calls.Load()
			w := gw.chat(t, nil)
			switch mode {
			case "closed":
				if w.Code != http.StatusServiceUnavailable {
					t.Fatalf("engine down, failure mode closed: status %d, want 503", w.Code)
				}
				e := decodeOpenAIError(t, w.Body.Bytes())
				if !strings.Contains(e.Message, "cannot check rate limits") || !strings.Contains(e.Message, "nothing was sent upstream") {
					t.Fatalf("503 message %q is not clear", e.Message)
				}
				if gw.upstream.calls.Load() != before {
					t.Fatal("a request reached the upstream while the store was down (closed mode)")
				}
				if !strings.Contains(logs.String(), "failure mode closed") {
					t.Fatalf("no log line explains the refusal:\n%s", logs.String())
				}
			case "open":
				if w.Code != 200 {
					t.Fatalf("engine down, failure mode open: status %d, want 200", w.Code)
				}
				if gw.upstream.calls.Load() != before+1 {
					t.Fatal("the admitted request did not reach the upstream")
				}
				if gw.h.FailOpenAdmits() != 1 || !strings.Contains(logs.String(), "admitted without limits") {
					t.Fatalf("fail-open admission not counted (%d) or not logged:\n%s", gw.h.FailOpenAdmits(), logs.String())
				}
			}
		})
	}
}

// gatewayOptions configure a test gateway.
type gatewayOptions struct {
	store     limiter.Store
	rules     []limiter.Rule
	failOpen  bool
	logger    *slog.Logger
	now       func() time.Time
	providers []providers.Provider
	aliases   []providers.Alias
	master    string
}

type gateway struct {
	h        *proxy.Handler
	limiter  *limiter.Limiter
	upstream *countingProvider
}

func newGateway(t *testing.T, o gatewayOptions) *gateway {
	t.Helper()
	rs, err := limiter.NewRules(o.rules)
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: o.store, Rules: rs})
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{limiter: l, upstream: newCountingMock("mock")}
	ps := o.providers
	if ps == nil {
		ps = []providers.Provider{g.upstream}
	}
	cat, err := providers.NewCatalog(ps, o.aliases, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.h, err = proxy.New(proxy.Config{
		Limiter: l, Catalog: cat, FailOpen: o.failOpen, Logger: o.logger, Now: o.now, MasterKey: o.master,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *gateway) chat(t *testing.T, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
	r.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w
}
