package app

import (
	"context"
	"sync"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/limiter/learn"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// Reservations that learn: the reconciler adds what completed requests
// used to per-day histograms in the config table; gateways read the p95
// of today's and yesterday's for a (route, model, key), cached a minute.

type estimateStore interface {
	AddEstimates(ctx context.Context, day string, adds map[configstore.EstimateKey]*learn.Histogram) error
	Estimate(ctx context.Context, k configstore.EstimateKey, days []string) (learn.Histogram, error)
}

// learn records a batch's observations.
func (a *App) learn(ctx context.Context, obs []reconcile.Observation) {
	es, ok := a.ConfigStore.(estimateStore)
	if !ok {
		return
	}
	adds := map[configstore.EstimateKey]*learn.Histogram{}
	for _, o := range obs {
		for _, k := range []configstore.EstimateKey{{Route: o.Route, Model: o.Model, Key: o.Key}, {Route: o.Route, Model: o.Model}} {
			h := adds[k]
			if h == nil {
				h = &learn.Histogram{}
				adds[k] = h
			}
			h.Add(o.OutputTokens)
			if o.Key == "" {
				break // the key-less estimate is the request's own
			}
		}
	}
	if err := es.AddEstimates(ctx, configstore.EstimateDay(a.Clock()), adds); err != nil {
		a.Log.Warn("could not record what requests used; reservations keep their last estimates", "err", err)
	}
}

// estimates serves learned output estimates to the gateway.
type estimates struct {
	store      estimateStore
	now        func() time.Time
	minSamples int64
	mu         sync.Mutex
	cache      *lru.Cache[configstore.EstimateKey, cachedEstimate]
}

type cachedEstimate struct {
	est  admission.Estimate
	read time.Time
}

// estimateTTL is how long a gateway trusts an estimate it read.
const estimateTTL = time.Minute

// OutputEstimate returns the learned p95 of output tokens for a route,
// model and key (falling back to the route and model over every key),
// once it rests on enough samples.
func (e *estimates) OutputEstimate(ctx context.Context, route, model, key string) (admission.Estimate, bool) {
	now := e.now()
	days := []string{configstore.EstimateDay(now), configstore.EstimateDay(now.Add(-24 * time.Hour))}
	for _, k := range []configstore.EstimateKey{{Route: route, Model: model, Key: key}, {Route: route, Model: model}} {
		e.mu.Lock()
		c, ok := e.cache.Get(k)
		e.mu.Unlock()
		if !ok || now.Sub(c.read) > estimateTTL {
			h, err := e.store.Estimate(ctx, k, days)
			if err != nil {
				return admission.Estimate{}, false
			}
			c = cachedEstimate{est: admission.Estimate{P95: h.Quantile(0.95), Samples: h.N()}, read: now}
			e.mu.Lock()
			e.cache.Put(k, c)
			e.mu.Unlock()
		}
		if c.est.Samples >= e.minSamples {
			c.est.PerKey = k.Key != ""
			return c.est, true
		}
		if key == "" {
			break
		}
	}
	return admission.Estimate{}, false
}

// estimates returns the app's estimate reader, one per app.
func (a *App) estimates(es estimateStore) *estimates {
	if a.est == nil {
		a.est = &estimates{store: es, now: a.Clock, minSamples: a.Config.Gateway.AdaptiveMinSamples,
			cache: lru.New[configstore.EstimateKey, cachedEstimate](10_000)}
	}
	return a.est
}
