package admission

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
	"github.com/tollgate/tollgate/providers/pricing"
)

func factsOrchestrator(t testing.TB) *Orchestrator {
	rs, _ := limiter.NewRules(nil)
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	cat, _ := providers.NewCatalog([]providers.Provider{mock.New("mock", 0), mock.New("Other", 0)}, nil, nil)
	o, err := New(Config{Limiter: l, Catalog: cat, Prices: pricing.New(map[string]limiter.Price{"other/gpt-4o": {Input: 7, Output: 9}}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A target's facts, kept or not, are what the price table and the
// built-in limits say of it: the first time, the times after, and past
// the bound.
func TestTargetFactsAsComputed(t *testing.T) {
	o := factsOrchestrator(t)
	mockP, _ := o.cfg.Catalog.Provider("mock")
	other, _ := o.cfg.Catalog.Provider("other")
	var targets []providers.Target
	for _, p := range []providers.Provider{mockP, other} {
		for _, m := range []string{"gpt-4o", "GPT-4o", "gpt-4o-mini", "claude-sonnet-4-5", "us.anthropic.claude-3-haiku-20240307-v1:0", "no-such-model", ""} {
			targets = append(targets, providers.Target{Provider: p, Model: m})
		}
	}
	for i := range maxKnownTargets + 10 {
		targets = append(targets, providers.Target{Provider: mockP, Model: fmt.Sprintf("model-%d", i)})
	}
	for round := range 2 {
		for _, tg := range targets {
			if got, want := o.facts.of(o, tg), factsOf(o, tg); got != want {
				t.Fatalf("round %d, %s: %+v, want %+v", round, tg, got, want)
			}
		}
	}
	if n := o.facts.len(); n != maxKnownTargets {
		t.Fatalf("%d targets kept, want the bound, %d", n, maxKnownTargets)
	}
	if f := o.facts.of(o, providers.Target{Provider: other, Model: "gpt-4o"}); f.price != (limiter.Price{Input: 7, Output: 9}) {
		t.Fatalf("the configured price of other/gpt-4o: %+v", f.price)
	}
}

// What is kept holds strings of its own: a model cut from a request body
// does not keep the body.
func TestTargetFactsKeepTheirOwnStrings(t *testing.T) {
	o := factsOrchestrator(t)
	p, _ := o.cfg.Catalog.Provider("mock")
	body := `{"model":"gpt-4o-2024-08-06"}`
	model := body[10:27]
	o.facts.of(o, providers.Target{Provider: p, Model: model})
	found := false
	for k := range *o.facts.known.Load() {
		if k.model == model {
			found = true
			if unsafe.StringData(k.model) == unsafe.StringData(model) {
				t.Fatal("the kept key shares the body's bytes")
			}
		}
	}
	if !found {
		t.Fatal("the model was not kept")
	}
}

// A model longer than any real id is not kept: a client cannot fill the
// memory with names of its choosing.
func TestTargetFactsKeepNoLongModel(t *testing.T) {
	o := factsOrchestrator(t)
	p, _ := o.cfg.Catalog.Provider("mock")
	long := providers.Target{Provider: p, Model: "gpt-4o-" + strings.Repeat("x", providers.MaxKeptModelID)}
	if got, want := o.facts.of(o, long), factsOf(o, long); got != want || o.facts.len() != 0 {
		t.Fatalf("%+v (want %+v), %d kept", got, want, o.facts.len())
	}
	at := providers.Target{Provider: p, Model: strings.Repeat("y", providers.MaxKeptModelID)}
	if o.facts.of(o, at); o.facts.len() != 1 {
		t.Fatalf("a model of %d bytes was not kept", providers.MaxKeptModelID)
	}
}

// Many requests at once, some on the same targets, all get the right
// facts, and every target is kept once (run under -race by make test).
func TestTargetFactsConcurrent(t *testing.T) {
	o := factsOrchestrator(t)
	mockP, _ := o.cfg.Catalog.Provider("mock")
	other, _ := o.cfg.Catalog.Provider("other")
	models := []string{"gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5", "gemini-2.5-flash", "no-such-model", "o3"}
	var targets []providers.Target
	for _, p := range []providers.Provider{mockP, other} {
		for _, m := range models {
			targets = append(targets, providers.Target{Provider: p, Model: m})
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tg := targets[(g*7+i)%len(targets)]
				if got, want := o.facts.of(o, tg), factsOf(o, tg); got != want {
					t.Errorf("%s: %+v, want %+v", tg, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := o.facts.len(); n != len(targets) {
		t.Fatalf("%d targets kept, want %d", n, len(targets))
	}
}
