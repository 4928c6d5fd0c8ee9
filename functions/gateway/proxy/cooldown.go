package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

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

// cooldownCache keeps what this instance knows of cooldowns for a short
// while, so a request does not read the store for every target.
type cooldownCache struct {
	mu sync.Mutex
	m  map[string]cooldownEntry
}

type cooldownEntry struct {
	until  time.Time
	readAt time.Time
}

// cooldownsOf returns the cooldowns of targets, reading the store for the
// ones not looked at within CooldownCache. A store failure means no
// cooldowns: the upstream will say 429 again if it must.
func (h *Handler) cooldownsOf(ctx context.Context, targets []providers.Target) map[string]time.Time {
	if h.cfg.Cooldowns == nil {
		return nil
	}
	now := h.cfg.Now()
	out := map[string]time.Time{}
	var stale []string
	h.cool.mu.Lock()
	for _, t := range targets {
		k := cooldownKey(t)
		e, ok := h.cool.m[k]
		if ok && now.Sub(e.readAt) < h.cfg.CooldownCache && !now.Before(e.readAt) {
			if e.until.After(now) {
				out[k] = e.until
			}
			continue
		}
		stale = append(stale, k)
	}
	h.cool.mu.Unlock()
	if len(stale) == 0 {
		return out
	}
	got, err := h.cfg.Cooldowns.CooldownUntil(ctx, stale)
	if err != nil {
		h.log.Warn("could not read provider cooldowns; trying the targets", "err", err)
		return out
	}
	h.cool.mu.Lock()
	defer h.cool.mu.Unlock()
	for _, k := range stale {
		until := got[k]
		h.cool.m[k] = cooldownEntry{until: until, readAt: now}
		if until.After(now) {
			out[k] = until
		}
	}
	return out
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
	k := cooldownKey(t)
	h.cool.mu.Lock()
	if e := h.cool.m[k]; until.After(e.until) {
		h.cool.m[k] = cooldownEntry{until: until, readAt: now}
	}
	h.cool.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.CompletionTimeout)
	defer cancel()
	if err := h.cfg.Cooldowns.SetCooldown(ctx, k, until); err != nil {
		h.log.Warn("could not share a provider cooldown; this instance still keeps it", "provider", t.Provider.Name(), "err", err)
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
