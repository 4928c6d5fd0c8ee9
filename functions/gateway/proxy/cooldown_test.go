package proxy_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
)

// countingCooldowns counts the store reads of cooldowns.
type countingCooldowns struct {
	*memstore.Store
	reads, keys atomic.Int64
}

func (c *countingCooldowns) CooldownUntil(ctx context.Context, keys []string) (map[string]time.Time, error) {
	c.reads.Add(1)
	c.keys.Add(int64(len(keys)))
	return c.Store.CooldownUntil(ctx, keys)
}

// A client naming endless model ids cannot make the gateway read the
// store for each, nor grow its cache: while no model of a provider cools
// down, one read per second per provider serves every model id.
func TestCooldownLookupsBounded(t *testing.T) {
	store := memstore.New()
	cd := &countingCooldowns{Store: store}
	rs, _ := limiter.NewRules(nil)
	l, _ := limiter.New(limiter.Config{Store: store, Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{mock.New("mock", 0)}, nil, nil)
	now := t0
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat, Cooldowns: cd, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, store: store}
	for i := range 5000 {
		body := fmt.Sprintf(`{"model":"mock/model-%d","messages":[{"role":"user","content":"hi"}]}`, i)
		if w := f.do("POST", "/v1/chat/completions", body, nil); w.Code != 200 {
			t.Fatalf("status %d %s", w.Code, w.Body)
		}
	}
	if cd.reads.Load() != 1 || cd.keys.Load() != 1 {
		t.Fatalf("%d cooldown reads of %d keys for 5000 model ids in one second, want one of one (the provider's)", cd.reads.Load(), cd.keys.Load())
	}
	// A model of the provider cools down: its own key is looked at, and
	// the model is routed around; the cache stays bounded.
	if err := store.SetCooldown(context.Background(), "mock/model-7", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := store.SetCooldown(context.Background(), "mock/*", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if w := f.do("POST", "/v1/chat/completions", `{"model":"mock/model-7","messages":[{"role":"user","content":"hi"}]}`, nil); w.Code != 429 {
		t.Fatalf("a model cooling down: %d, want 429", w.Code)
	}
	for i := range 6000 {
		f.do("POST", "/v1/chat/completions", fmt.Sprintf(`{"model":"mock/other-%d","messages":[{"role":"user","content":"hi"}]}`, i), nil)
	}
	if n := proxy.CooldownEntries(h); n > 4096 {
		t.Fatalf("%d cooldown entries cached, want at most 4096", n)
	}
}
