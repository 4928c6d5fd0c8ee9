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
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/fast", Limit: limiter.Bucket{Capacity: 1, RefillPerSecond: 5}},
		// One per 10 s.
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/slow", Limit: limiter.Bucket{Capacity: 1, RefillPerSecond: 0.1}, PerChild: true},
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
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/seed", Limit: limiter.Window{Period: time.Minute, MaxRequests: 1}},
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

// A flood of requests that may wait does not wait for room that one of
// them will take: against a bucket that will admit one request in its
// Retry-After, of 200 background requests refused together one waits and
// the others are answered 429 at once (not held the whole minute).
func TestWaitersOnlyForRoomAhead(t *testing.T) {
	g := newClassGateway(t,
		limiter.Rule{Scope: limiter.ScopeUserPath, Subject: "/flood", Limit: limiter.Bucket{Capacity: 1, RefillPerSecond: 1.0 / 50}},
	)
	if s, _ := g.chat("/flood/held", "background"); s != 200 {
		t.Fatal(s)
	}
	g.hold = make(chan struct{})
	codes := make(chan int, 200)
	for range 200 {
		go func() { s, _ := g.chat("/flood/held", "background"); codes <- s }()
	}
	atOnce := 0
	for atOnce < 199 {
		select {
		case s := <-codes:
			if s != 429 {
				t.Fatalf("a request answered %d while the one waiting is held", s)
			}
			atOnce++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 200 answered at once; the rest are waiting for room one of them will take", atOnce)
		}
	}
	close(g.hold)
	if s := <-codes; s != 200 {
		t.Fatalf("the one waiter, after its wait: %d", s)
	}
	if w := g.waits("/flood/held"); len(w) != 1 || w[0] < 40*time.Second || w[0] > 60*time.Second {
		t.Fatalf("waits %v, want one of about 50 s", w)
	}
}

type stubKeys map[string]proxy.KeyInfo

func (k stubKeys) Lookup(_ context.Context, secret string) (proxy.KeyInfo, error) {
	if info, ok := k[secret]; ok {
		return info, nil
	}
	return proxy.KeyInfo{}, proxy.ErrUnknownKey
}

// A managed key may cap the class its requests claim: with max_class
// standard (2 s), X-Tollgate-Class: background is taken as standard, and
// a 10 s Retry-After is answered at once instead of waited out.
func TestKeyCapsTheClassItsRequestsClaim(t *testing.T) {
	rs, _ := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeUserPath, Subject: "/k", PerChild: true, Limit: limiter.Bucket{Capacity: 1, RefillPerSecond: 0.1}}})
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{mock.New("mock", 0)}, nil, nil)
	now := t0
	var slept []time.Duration
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat, MasterKey: "master",
		Keys: stubKeys{
			"capped": {ID: "key_capped", UserPath: "/k/capped", MaxClass: "standard"},
			"free":   {ID: "key_free", UserPath: "/k/free"},
		},
		Now:   func() time.Time { return now },
		Sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); now = now.Add(d); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	chat := func(key string) int {
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("X-Tollgate-Class", "background")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, key := range []string{"capped", "free"} {
		if s := chat(key); s != 200 {
			t.Fatalf("%s: first request %d", key, s)
		}
	}
	if s := chat("capped"); s != 429 || len(slept) != 0 {
		t.Fatalf("a capped key claiming background: %d after waits %v, want 429 at once", s, slept)
	}
	if s := chat("free"); s != 200 || len(slept) != 1 {
		t.Fatalf("an uncapped key claiming background: %d after waits %v, want the 10 s waited out", s, slept)
	}
}
