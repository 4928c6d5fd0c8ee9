package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// admissionLog records when requests reached the upstream: when they were
// admitted.
type admissionLog struct {
	providers.Provider
	mu    sync.Mutex
	times []time.Time
}

func (a *admissionLog) Serve(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	a.mu.Lock()
	a.times = append(a.times, time.Now())
	a.mu.Unlock()
	return a.Provider.Serve(ctx, w, r)
}

func (a *admissionLog) AcceptsAnyModel() bool { return true }

func (a *admissionLog) reset() {
	a.mu.Lock()
	a.times = nil
	a.mu.Unlock()
}

func (a *admissionLog) admitted() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.times...)
}

// statusLog counts the answers a handler gave.
type statusLog struct {
	h  http.Handler
	mu sync.Mutex
	n  map[int]int
}

func (s *statusLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, status: 200}
	s.h.ServeHTTP(rec, r)
	s.mu.Lock()
	s.n[rec.status]++
	s.mu.Unlock()
}

func (s *statusLog) count(code int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[code]
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }

var slowRule = limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/slow", Limit: limiter.Window{Period: 2 * time.Second, MaxRequests: 1}, PerChild: true}

// checkNotEarly replays the admission instants into a fresh limiter with
// the same rule: had any request been admitted early, the replay refuses it.
func checkNotEarly(t *testing.T, path string, times []time.Time) {
	t.Helper()
	rs, _ := limiter.NewRules([]limiter.Rule{slowRule})
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	for i, at := range times {
		d, err := l.Admit(context.Background(), at, limiter.Request{ID: "replay" + itoa(int64(i)), Subject: limiter.Subject{UserPath: path}})
		if err != nil || !d.Allowed {
			t.Fatalf("request %d was admitted at %v, earlier than the rule allows (%v)", i, at, d.Refused.Message())
		}
	}
}

// Real clients honour the gateway's Retry-After: against one request per
// 2 seconds, the SDK's own retries succeed once the wait is over, and no
// request is admitted early. openai-go here; the official Node package
// through tests/node/retry.mjs.
func TestClientsHonourRetryAfter(t *testing.T) {
	t.Parallel() // waits in real time on its own processes, tables and ports; see docs/testing.md
	up := &admissionLog{Provider: newCountingMock("mock")}
	store := memstore.New()
	rs, _ := limiter.NewRules([]limiter.Rule{slowRule})
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{up}, nil, nil)
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	statuses := &statusLog{h: h, n: map[int]int{}}
	srv := httptest.NewServer(statuses)
	t.Cleanup(srv.Close)

	t.Run("openai-go", func(t *testing.T) {
		up.reset()
		c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(3),
			option.WithHeader("X-Tollgate-User-Path", "/slow/go"))
		for i := range 2 {
			if _, err := c.Chat.Completions.New(context.Background(), userMessage("hi")); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if statuses.count(429) == 0 {
			t.Fatal("the client was never refused: the test proves nothing")
		}
		checkNotEarly(t, "/slow/go", up.admitted())
	})

	t.Run("node-openai", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join("node_modules", "openai")); err != nil {
			if os.Getenv(dynamotest.Require) != "" {
				t.Fatal("tests/node_modules/openai is missing: make test installs it")
			}
			t.Skip("the openai npm package is not installed (make test installs it)")
		}
		up.reset()
		refusedBefore := statuses.count(429)
		cmd := exec.Command("node", "node/retry.mjs")
		cmd.Env = append(os.Environ(), "TOLLGATE_URL="+srv.URL, "TOLLGATE_USER_PATH=/slow/node")
		out, err := cmd.Output()
		var res struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
			Calls []struct {
				Start, End       int64
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"calls"`
		}
		_ = json.Unmarshal(out, &res)
		if err != nil || !res.OK || len(res.Calls) != 2 {
			t.Fatalf("node client: %v %s", err, strings.TrimSpace(string(out)))
		}
		if statuses.count(429) == refusedBefore {
			t.Fatal("the Node client was never refused: the test proves nothing")
		}
		if res.Calls[1].End-res.Calls[1].Start < 1000 {
			t.Fatalf("the second call returned in %d ms: it cannot have waited", res.Calls[1].End-res.Calls[1].Start)
		}
		checkNotEarly(t, "/slow/node", up.admitted())
	})
}
