package admission

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// facts are what an admission reads of a target on every request that
// nothing changes while the process serves: its price (the price table
// is built once) and its model's output limit (the built-in table).
type facts struct {
	price     limiter.Price
	maxOut    int64
	hasMaxOut bool
}

// factsOf computes t's facts from prices and the built-in table.
func factsOf(o *Orchestrator, t providers.Target) facts {
	var f facts
	f.price, _ = o.cfg.Prices.Lookup(t.Provider.Name(), t.Model)
	f.maxOut, f.hasMaxOut = providers.MaxOutputTokens(t.Model)
	return f
}

// factsKey names a target by its provider instance and model.
type factsKey struct{ provider, model string }

// maxKnownTargets bounds the targets whose facts are kept, and
// providers.MaxKeptModelID the length of a model kept: a client names any
// model of a provider that serves any, and any id of any provider as
// "provider/id" (DESIGN §8: a cache keyed by what a client chooses is
// bounded, here to 256 entries of at most 256 bytes). Past them, facts
// are computed each time, as they were before, without the lock.
const maxKnownTargets = 256

// targetFacts keeps the facts of up to maxKnownTargets targets. A target
// kept costs one atomic load and a map lookup; a new one, room left, a
// copy of the map (at most maxKnownTargets times a process). Safe for
// concurrent use.
type targetFacts struct {
	known atomic.Pointer[map[factsKey]facts]
	mu    sync.Mutex // serialises additions
}

// of returns t's facts, kept after the first time while there is room.
func (k *targetFacts) of(o *Orchestrator, t providers.Target) facts {
	key := factsKey{t.Provider.Name(), t.Model}
	m := k.known.Load()
	if m != nil {
		if f, ok := (*m)[key]; ok {
			return f
		}
	}
	f := factsOf(o, t)
	if len(t.Model) > providers.MaxKeptModelID || (m != nil && len(*m) >= maxKnownTargets) {
		return f
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var old map[factsKey]facts
	if m := k.known.Load(); m != nil {
		old = *m
	}
	if _, ok := old[key]; ok || len(old) >= maxKnownTargets {
		return f
	}
	next := make(map[factsKey]facts, len(old)+1)
	maps.Copy(next, old)
	// The key's own strings: a model read from a request body must not
	// keep the body alive.
	next[factsKey{strings.Clone(key.provider), strings.Clone(key.model)}] = f
	k.known.Store(&next)
	return f
}

// len is how many targets' facts are kept.
func (k *targetFacts) len() int {
	if m := k.known.Load(); m != nil {
		return len(*m)
	}
	return 0
}
