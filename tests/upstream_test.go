package tests

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// fakeUpstream is an httptest provider that replays recorded answers and
// keeps what it was sent.
type fakeUpstream struct {
	*httptest.Server
	calls atomic.Int64
	mu    sync.Mutex
	reqs  []recordedRequest
	serve http.HandlerFunc
}

type recordedRequest struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

func newUpstream(t *testing.T, serve http.HandlerFunc) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{serve: serve}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.calls.Add(1)
		u.mu.Lock()
		u.reqs = append(u.reqs, recordedRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.serve(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) last(t *testing.T) recordedRequest {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("the upstream was never called")
	}
	return u.reqs[len(u.reqs)-1]
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replay answers with a recorded JSON body.
func replay(t testing.TB, name string, status int, hdr ...string) http.HandlerFunc {
	body := fixture(t, name)
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// replaySSE answers with a recorded event stream, one event at a time,
// flushed, with gap between events.
func replaySSE(t testing.TB, name string, gap time.Duration) http.HandlerFunc {
	body := fixture(t, name)
	events := splitEvents(body)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, ev := range events {
			if r.Context().Err() != nil {
				return
			}
			_, _ = w.Write(ev)
			http.NewResponseController(w).Flush()
			if gap > 0 {
				time.Sleep(gap)
			}
		}
	}
}

// splitEvents splits a recorded stream into its events, blank line kept.
func splitEvents(b []byte) [][]byte {
	sep := []byte("\n\n")
	if bytes.Contains(b, []byte("\r\n\r\n")) {
		sep = []byte("\r\n\r\n")
	}
	var out [][]byte
	for _, ev := range bytes.SplitAfter(b, sep) {
		if len(bytes.TrimSpace(ev)) > 0 {
			out = append(out, ev)
		}
	}
	return out
}

// usageRules give every request a lease, so its completion (and the usage
// it recorded) shows in the store's change feed.
var usageRules = []limiter.Rule{
	{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Window{Period: time.Minute, MaxTokens: 1 << 40}},
	{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 1000}},
}

// sdkGateway is a gateway on the embedded store in front of the given
// providers, served over real HTTP for SDK clients.
type sdkGateway struct {
	*httptest.Server
	store   *memstore.Store
	limiter *limiter.Limiter
	h       *proxy.Handler
}

func newSDKGateway(t *testing.T, ps []providers.Provider, aliases []providers.Alias, rules ...limiter.Rule) *sdkGateway {
	t.Helper()
	if rules == nil {
		rules = usageRules
	}
	g := &sdkGateway{store: memstore.New()}
	rs, err := limiter.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	if g.limiter, err = limiter.New(limiter.Config{Store: g.store, Rules: rs}); err != nil {
		t.Fatal(err)
	}
	cat, err := providers.NewCatalog(ps, aliases, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.h, err = proxy.New(proxy.Config{Limiter: g.limiter, Catalog: cat}); err != nil {
		t.Fatal(err)
	}
	g.Server = httptest.NewServer(g.h)
	t.Cleanup(g.Close)
	return g
}

// recorded returns the usage recorded by the completions so far, oldest
// first.
func (g *sdkGateway) recorded() []memstore.Event {
	evs, _ := g.store.Events(0, 1000)
	return evs
}

// lastUsage waits for the last completion's usage: a stream completes when
// its handler returns, just after the client has read the last byte.
func (g *sdkGateway) lastUsage(t *testing.T, want int) limiter.Usage {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs := g.recorded()
		if len(evs) >= want {
			return evs[want-1].Used
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d completions recorded, want %d", len(evs), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func contains(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("%s: %q does not contain %q", what, got, want)
	}
}
