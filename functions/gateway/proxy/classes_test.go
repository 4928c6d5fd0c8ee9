package proxy_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
)

// classGateway is a gateway whose clock only moves when a request waits,
// and whose waits can be held open by a test.
type classGateway struct {
	h     *proxy.Handler
	mu    sync.Mutex
	now   time.Time
	slept map[string][]time.Duration // by user path of the waiting request
	hold  chan struct{}              // when set, the wait of a request on a path ending in /held blocks on it
}

func newClassGateway(t *testing.T, rules ...limiter.Rule) *classGateway {
	t.Helper()
	g := &classGateway{now: t0, slept: map[string][]time.Duration{}}
	rs, err := limiter.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{mock.New("mock", 0)}, nil, nil)
	g.h, err = proxy.New(proxy.Config{
		Limiter: l, Catalog: cat,
		Now:  func() time.Time { g.mu.Lock(); defer g.mu.Unlock(); return g.now },
		Rand: func() float64 { return 1 }, // the most jitter, to show it stays within the class's bound
		Sleep: func(ctx context.Context, d time.Duration) error {
			path, _ := ctx.Value(pathKey{}).(string)
			if strings.HasSuffix(path, "/held") && g.hold != nil {
				<-g.hold
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			g.slept[path] = append(g.slept[path], d)
			g.now = g.now.Add(d)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

type pathKey struct{}

func (g *classGateway) chat(path, class string) (int, string) {
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody))
	r = r.WithContext(context.WithValue(r.Context(), pathKey{}, path))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Tollgate-User-Path", path)
	if class != "" {
		r.Header.Set("X-Tollgate-Class", class)
	}
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	return w.Code, w.Header().Get("Retry-After-Ms")
}

func (g *classGateway) waits(path string) []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.slept[path]...)
}

// Each class waits out a Retry-After that fits its bound (300ms, 2s, 20s,
// 60s by default), once and jittered upwards within the bound, and answers
// 429 at once when it does not fit; waits are per request, so an
// interactive request never waits behind a batch one.
func TestClassesWaitWithinTheirBounds(t *testing.T) {
	g := newClassGateway(t,
		// 5 a second: one request leaves the next 200 ms to wait.
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/fast", Bucket: &limiter.Bucket{Capacity: 1, RefillPerSecond: 5}},
		// One per 10 s.
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/slow", Bucket: &limiter.Bucket{Capacity: 1, RefillPerSecond: 0.1}, PerChild: true},
	)
	if s, _ := g.chat("/fast", "interactive"); s != 200 {
		t.Fatal(s)
	}
	if s, _ := g.chat("/fast", "interactive"); s != 200 {
		t.Fatalf("an interactive request 200 ms from a slot: %d", s)
	}
	if w := g.waits("/fast"); len(w) != 1 || w[0] < 200*time.Millisecond || w[0] > 300*time.Millisecond {
		t.Fatalf("interactive waited %v; want the 200 ms Retry-After, jittered within its 300 ms", w)
	}

	if s, _ := g.chat("/slow/a", "batch"); s != 200 {
		t.Fatal(s)
	}
	if s, _ := g.chat("/slow/a", "batch"); s != 200 {
		t.Fatalf("a batch request 10 s from a slot: %d", s)
	}
	if w := g.waits("/slow/a"); len(w) != 1 || w[0] < 10*time.Second || w[0] > 11*time.Second {
		t.Fatalf("batch waited %v; want 10 s and at most a tenth more", w)
	}
	for _, class := range []string{"", "standard", "interactive"} {
		if s, ms := g.chat("/slow/a", class); s != 429 || ms == "" {
			t.Fatalf("class %q with a 10 s wait: %d (retry-after-ms %q), want 429 at once", class, s, ms)
		}
	}
	if w := g.waits("/slow/a"); len(w) != 1 {
		t.Fatalf("a request whose wait exceeds its class's bound waited: %v", w)
	}
	if s, _ := g.chat("/slow/a", "urgent"); s != 400 {
		t.Fatalf("an unknown class: %d", s)
	}

	// A batch request waiting (held open) does not hold up an interactive
	// one: it is answered while the batch request still waits.
	g.hold = make(chan struct{})
	if s, _ := g.chat("/slow/held", "batch"); s != 200 {
		t.Fatal(s)
	}
	batchDone := make(chan int)
	go func() { s, _ := g.chat("/slow/held", "batch"); batchDone <- s }()
	if s, _ := g.chat("/fast", "interactive"); s != 200 {
		t.Fatalf("interactive while a batch request waits: %d", s)
	}
	select {
	case s := <-batchDone:
		t.Fatalf("the batch request finished first (%d): the interactive one waited behind it", s)
	default:
	}
	close(g.hold)
	if s := <-batchDone; s != 200 {
		t.Fatalf("the held batch request after its wait: %d", s)
	}
}

// A request that names no class (and whose key fixes none) waits for
// nothing: seed 000's immediate, exact 429. A retry 1 s before its
// Retry-After is refused, one at it admitted, and neither is held.
func TestNoClassIsAnsweredAtOnce(t *testing.T) {
	g := newClassGateway(t,
		// One request a minute, sliding: the second, 1.5 s in, has no room.
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/seed", Period: time.Minute, MaxRequests: 1},
	)
	g.now = t0.Truncate(time.Minute).Add(30 * time.Second)
	if s, _ := g.chat("/seed", ""); s != 200 {
		t.Fatal(s)
	}
	g.now = g.now.Add(1500 * time.Millisecond)
	s, ms := g.chat("/seed", "")
	if s != 429 || ms == "" {
		t.Fatalf("the second request 1.5 s in: %d (retry-after-ms %q), want 429 at once", s, ms)
	}
	wait, _ := time.ParseDuration(ms + "ms")
	g.now = g.now.Add(wait - time.Second)
	if s, _ := g.chat("/seed", ""); s != 429 {
		t.Fatalf("a retry 1 s before Retry-After: %d, want 429", s)
	}
	g.now = g.now.Add(time.Second)
	if s, _ := g.chat("/seed", ""); s != 200 {
		t.Fatalf("a retry at Retry-After: %d, want 200", s)
	}
	if w := g.waits("/seed"); len(w) != 0 {
		t.Fatalf("requests naming no class waited %v", w)
	}
}
