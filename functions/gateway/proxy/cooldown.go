package proxy

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/lru"
	"github.com/tollgate/tollgate/providers"
)

// Cooldowns remember, across every gateway instance, that a provider's
// model asked to be left alone (it answered 429, or reported nothing left)
// and until when. The embedded and the DynamoDB store both keep them.
type Cooldowns interface {
	// CooldownUntil returns, for each key that is cooling down or was, the
	// end of its cooldown.
	CooldownUntil(ctx context.Context, keys []string) (map[string]time.Time, error)
	// SetCooldown extends a key's cooldown to until; it never shortens one.
	SetCooldown(ctx context.Context, key string, until time.Time) error
}

// cooldownKey names a target's cooldown: provider and model, case folded.
func cooldownKey(t providers.Target) string {
	return strings.ToLower(t.Provider.Name()) + "/" + strings.ToLower(t.Model)
}

// providerKey names the cooldown of any model of a target's provider: the
// latest end of any of its models' cooldowns. A provider none of whose
// models is cooling down needs no look at a model's own, so a client
// naming endless model ids costs no store reads.
func providerKey(t providers.Target) string {
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
func (h *Handler) cooldownsOf(ctx context.Context, targets []providers.Target) map[string]time.Time {
	if h.cfg.Cooldowns == nil {
		return nil
	}
	now := h.cfg.Now()
	cooling := map[string]bool{} // providers with a model cooling down
	for _, t := range h.lookUp(ctx, now, targets, providerKey) {
		cooling[t] = true
	}
	var candidates []providers.Target
	for _, t := range targets {
		if cooling[providerKey(t)] {
			candidates = append(candidates, t)
		}
	}
	out := map[string]time.Time{}
	if len(candidates) == 0 {
		return out
	}
	for _, k := range h.lookUp(ctx, now, candidates, cooldownKey) {
		e, _ := h.cool.Get(k)
		out[k] = e.until
	}
	return out
}

// lookUp returns the keys (by keyOf) of targets cooling down at now.
func (h *Handler) lookUp(ctx context.Context, now time.Time, targets []providers.Target, keyOf func(providers.Target) string) []string {
	var hot, stale []string
	for _, t := range targets {
		k := keyOf(t)
		e, ok := h.cool.Get(k)
		if ok && now.Sub(e.readAt) < h.cfg.CooldownCache && !now.Before(e.readAt) {
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
	err := h.storeCall(ctx, func(ctx context.Context) (err error) {
		got, err = h.cfg.Cooldowns.CooldownUntil(ctx, stale)
		return err
	})
	if err != nil {
		h.log.Warn("could not read provider cooldowns; trying the targets", "err", err)
		return hot
	}
	for _, k := range stale {
		until := got[k]
		h.cool.Put(k, cooldownEntry{until: until, readAt: now})
		if until.After(now) {
			hot = append(hot, k)
		}
	}
	return hot
}

// coolDown records that target t should not be called until the time its
// upstream's headers give (or DefaultCooldown when they give none).
func (h *Handler) coolDown(ctx context.Context, t providers.Target, l providers.UpstreamLimits, why string) {
	if h.cfg.Cooldowns == nil {
		return
	}
	wait := l.RetryAfter
	if wait <= 0 {
		wait = max(l.ResetRequests, l.ResetTokens)
	}
	if wait <= 0 {
		wait = h.cfg.DefaultCooldown
	}
	now := h.cfg.Now()
	until := now.Add(wait)
	ctx, cancel := h.storeContext(ctx)
	defer cancel()
	for _, k := range []string{cooldownKey(t), providerKey(t)} {
		h.cool.Update(k, func(e cooldownEntry, _ bool) cooldownEntry {
			if until.After(e.until) {
				return cooldownEntry{until: until, readAt: now}
			}
			return e
		})
		if err := h.cfg.Cooldowns.SetCooldown(ctx, k, until); err != nil {
			h.log.Warn("could not share a provider cooldown; this instance still keeps it", "provider", t.Provider.Name(), "err", err)
			break
		}
	}
	h.log.Info("provider cooling down: it "+why+"; routing around it until then",
		"provider", t.Provider.Name(), "target_model", t.Model, "until", until, "wait_ms", wait.Milliseconds())
}

// coolDownIfExhausted starts a cooldown when a successful answer reports
// nothing left in a dimension.
func (h *Handler) coolDownIfExhausted(ctx context.Context, t providers.Target, l providers.UpstreamLimits) {
	switch {
	case l.RemainingRequests == 0 && l.ResetRequests > 0:
		h.coolDown(ctx, t, providers.UpstreamLimits{ResetRequests: l.ResetRequests}, "reported no requests left")
	case l.RemainingTokens == 0 && l.ResetTokens > 0:
		h.coolDown(ctx, t, providers.UpstreamLimits{ResetTokens: l.ResetTokens}, "reported no tokens left")
	}
}

// writeCooldown answers a request every target of which is cooling down.
func writeCooldown(w http.ResponseWriter, proto providers.Protocol, c *cooldown, now time.Time) {
	wait := max(c.until.Sub(now), 0)
	h := w.Header()
	h.Set(headerDecision, DecisionLocalReject)
	h.Set(headerRule, "cooldown:"+c.target.String())
	setRetryAfter(h, wait)
	writeError(w, proto, apiError{
		status: http.StatusTooManyRequests, typ: errTypeRateLimit, code: errCodeRateLimitExceeded,
		message: "provider " + c.target.Provider.Name() + " asked to wait before more " + c.target.Model +
			" requests; retry after " + strconv.FormatInt(ceilSeconds(wait), 10) + "s",
		decision: DecisionLocalReject,
	}, wait)
}
