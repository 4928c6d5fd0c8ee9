package proxy_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
)

// hanging answers nothing until its request is cancelled, telling started
// when it has the request.
type hanging struct {
	name    string
	started chan struct{}
	once    sync.Once
}

func (p *hanging) Name() string          { return p.name }
func (p *hanging) AcceptsAnyModel() bool { return true }
func (p *hanging) Serve(ctx context.Context, _ http.ResponseWriter, _ *providers.Request) (providers.Result, error) {
	p.once.Do(func() { close(p.started) })
	<-ctx.Done()
	return providers.Result{}, &providers.Error{Provider: p.name, Err: ctx.Err()}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A client that disconnects before the first byte is not an upstream
// failure: the next target of the alias is never called and no line says
// the upstream failed.
func TestClientGoneIsNoUpstreamFailure(t *testing.T) {
	first := &hanging{name: "first", started: make(chan struct{})}
	second := &counting{Provider: mock.New("second", 0)}
	cat, err := providers.NewCatalog([]providers.Provider{first, second}, []providers.Alias{{
		Name: "chain", Strategy: providers.Failover,
		Targets: []providers.AliasTarget{{Target: "first/m", Weight: 1}, {Target: "second/m", Weight: 1}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeProvider, Subject: "first", Limit: limiter.Gauge{MaxInFlight: 1}}})
	store := memstore.New()
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	var logs syncBuffer
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, "POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"chain","messages":[{"role":"user","content":"hi"}]}`))
	r.Header.Set("Content-Type", "application/json")
	finished := make(chan struct{})
	go func() {
		h.ServeHTTP(httptest.NewRecorder(), r)
		close(finished)
	}()
	<-first.started
	cancel()
	<-finished
	if n := second.calls.Load(); n != 0 {
		t.Fatalf("the client left, yet the next target was called %d times", n)
	}
	out := logs.String()
	if strings.Contains(out, "upstream failed") || strings.Contains(out, "will_fail_over") {
		t.Fatalf("a client's cancellation logged as an upstream failure:\n%s", out)
	}
	if !strings.Contains(out, "client went away before the answer") {
		t.Fatalf("no line says the client left:\n%s", out)
	}
	// The slot of the first target is back.
	if d, _ := l.Admit(context.Background(), t0, limiter.Request{ID: "after", Subject: limiter.Subject{Provider: "first", Model: "m"}}); !d.Allowed {
		t.Fatalf("the slot was not given back: %+v", d.Refused)
	}
}
