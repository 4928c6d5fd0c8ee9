package admission

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/providers"
)

// CooldownKey names a target's cooldown: provider and model, case folded.
func CooldownKey(t providers.Target) string {
	return strings.ToLower(t.Provider.Name()) + "/" + strings.ToLower(t.Model)
}

// ProviderKey names the cooldown of any model of a target's provider: the
// latest end of any of its models' cooldowns. A provider none of whose
// models is cooling down needs no look at a model's own, so a client
// naming endless model ids costs no store reads.
func ProviderKey(t providers.Target) string {
	return strings.ToLower(t.Provider.Name()) + "/*"
}

// maxCooldownEntries bounds what an instance keeps of cooldowns: model
// ids are the client's to choose.
const maxCooldownEntries = 4096

// cooldownCache keeps what this instance knows of cooldowns for a short
// while, so a request does not read the store for every target.
type cooldownCache = lru.Cache[string, cooldownEntry]

type cooldownEntry struct {
	until  time.Time
	readAt time.Time
}

// cooldownsOf returns the cooldowns of targets, reading the store for the
// ones not looked at within CooldownCache: first their providers', then,
// for providers with a model cooling down, the models'. A store failure
// means no cooldowns: the upstream will say 429 again if it must.
func (o *Orchestrator) cooldownsOf(ctx context.Context, now time.Time, targets []providers.Target) map[string]time.Time {
	if o.cfg.Cooldowns == nil {
		return nil
	}
	cooling := map[string]bool{} // providers with a model cooling down
	for _, t := range o.lookUp(ctx, now, targets, ProviderKey) {
		cooling[t] = true
	}
	var candidates []providers.Target
	for _, t := range targets {
		if cooling[ProviderKey(t)] {
			candidates = append(candidates, t)
		}
	}
	out := map[string]time.Time{}
	if len(candidates) == 0 {
		return out
	}
	for _, k := range o.lookUp(ctx, now, candidates, CooldownKey) {
		e, _ := o.cool.Get(k)
		out[k] = e.until
	}
	return out
}

// lookUp returns the keys (by keyOf) of targets cooling down at now.
func (o *Orchestrator) lookUp(ctx context.Context, now time.Time, targets []providers.Target, keyOf func(providers.Target) string) []string {
	var hot, stale []string
	for _, t := range targets {
		k := keyOf(t)
		e, ok := o.cool.Get(k)
		if ok && now.Sub(e.readAt) < o.cfg.CooldownCache && !now.Before(e.readAt) {
			if e.until.After(now) {
				hot = append(hot, k)
			}
			continue
		}
		if !slices.Contains(stale, k) {
			stale = append(stale, k)
		}
	}
	if len(stale) == 0 {
		return hot
	}
	var got map[string]time.Time
	err := o.StoreCall(ctx, func(ctx context.Context) (err error) {
		got, err = o.cfg.Cooldowns.CooldownUntil(ctx, stale)
		return err
	})
	if err != nil {
		o.log.Warn("could not read provider cooldowns; trying the targets", "err", err)
		return hot
	}
	for _, k := range stale {
		until := got[k]
		o.cool.Put(k, cooldownEntry{until: until, readAt: now})
		if until.After(now) {
			hot = append(hot, k)
		}
	}
	return hot
}

// coolDown records that target t should not be called until the time its
// upstream's headers give (or DefaultCooldown when they give none).
func (o *Orchestrator) coolDown(ctx context.Context, t providers.Target, l providers.UpstreamLimits, why string) {
	if o.cfg.Cooldowns == nil {
		return
	}
	wait := l.RetryAfter
	if wait <= 0 {
		wait = max(l.ResetRequests, l.ResetTokens)
	}
	if wait <= 0 {
		wait = o.cfg.DefaultCooldown
	}
	now := o.cfg.Now()
	until := now.Add(wait)
	ctx, cancel := o.StoreContext(ctx)
	defer cancel()
	for _, k := range []string{CooldownKey(t), ProviderKey(t)} {
		o.cool.Update(k, func(e cooldownEntry, _ bool) cooldownEntry {
			if until.After(e.until) {
				return cooldownEntry{until: until, readAt: now}
			}
			return e
		})
		if err := o.cfg.Cooldowns.SetCooldown(ctx, k, until); err != nil {
			o.log.Warn("could not share a provider cooldown; this instance still keeps it", "provider", t.Provider.Name(), "err", err)
			break
		}
	}
	o.log.Info("provider cooling down: it "+why+"; routing around it until then",
		"provider", t.Provider.Name(), "target_model", t.Model, "until", until, "wait_ms", wait.Milliseconds())
}

// coolDownIfExhausted starts a cooldown when a successful answer reports
// nothing left in a dimension.
func (o *Orchestrator) coolDownIfExhausted(ctx context.Context, t providers.Target, l providers.UpstreamLimits) {
	switch {
	case l.RemainingRequests == 0 && l.ResetRequests > 0:
		o.coolDown(ctx, t, providers.UpstreamLimits{ResetRequests: l.ResetRequests}, "reported no requests left")
	case l.RemainingTokens == 0 && l.ResetTokens > 0:
		o.coolDown(ctx, t, providers.UpstreamLimits{ResetTokens: l.ResetTokens}, "reported no tokens left")
	}
}

// CooldownEntries is how many cooldowns the orchestrator caches.
func (o *Orchestrator) CooldownEntries() int { return o.cool.Len() }
