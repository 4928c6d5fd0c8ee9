package proxy

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// exchange is one client request, parsed as far as admission needs.
type exchange struct {
	proto       providers.Protocol
	op          providers.Op
	model       string // as the client named it
	body        []byte
	stream      bool
	maxTokens   int64 // the client's own output cap; 0 when unset
	choices     int64 // completions asked for (n, candidateCount); 0 or 1 is one
	inputTokens int64 // the gateway's estimate of the prompt
	caller      Caller
	// userPathOnly admits by user-path rules only, holding no slot (batch
	// submissions).
	userPathOnly bool
	// noOutput reserves no output tokens (embeddings, audio).
	noOutput bool
	// session holds the lease past the answer: a Realtime session's, ended
	// by the client or by its expiry.
	session bool
	// free charges nothing to the rules that count generations (token
	// counting, which the providers neither bill nor count against their
	// generation limits): inputTokens is only what the upstream is told.
	// Pauses still apply.
	free bool
	// reserveOut is the output reservation, set by serve.
	reserveOut int64
	// capField is the body field that carries the client's output cap.
	capField string

	// For audio and passthrough calls.
	method, path, query string
	header              http.Header
	// route, when set, is the resolution to use instead of the model's
	// (passthrough names its provider in the URL).
	route *providers.Route
}

// chargedInput is the input a request reserves.
func (ex *exchange) chargedInput() int64 {
	if ex.free {
		return 0
	}
	return ex.inputTokens
}

// serve admits ex for the first target of its model with capacity,
// forwards it, and records its usage. Targets whose provider or model rule
// is exhausted, or that the provider asked to wait (a cooldown), are
// skipped without being called; a user-path rule refuses outright, since
// no other target can help. A refusal may then be answered by waiting a
// short Retry-After once, or by clamping max_tokens, when the route is
// configured for it.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, ex *exchange) {
	var route providers.Route
	if ex.route != nil {
		route = *ex.route
	} else {
		var ok bool
		if route, ok = h.cfg.Catalog.Resolve(ex.model); !ok {
			writeError(w, ex.proto, apiError{status: http.StatusNotFound, typ: errTypeNotFound, code: errCodeModelNotFound, param: "model",
				message: "the model `" + ex.model + "` does not exist or is not served by this gateway"}, 0)
			return
		}
	}
	h.refresh(r.Context())
	reqID := h.cfg.NewID()
	w.Header().Set("X-Request-Id", reqID)
	if ex.header == nil {
		ex.header = r.Header
	}
	ex.reserveOut = ex.maxTokens
	if ex.reserveOut <= 0 {
		ex.reserveOut = h.cfg.DefaultMaxTokens
	}
	if ex.userPathOnly || ex.noOutput || ex.free || ex.op == providers.OpEmbeddings {
		ex.reserveOut = 0
	}
	if ex.session {
		ex.reserveOut = h.cfg.RealtimeSessionTokens
	}
	ex.inputTokens = min(max(ex.inputTokens, 0), limiter.MaxAmount)
	waited, clamped := false, false
	for attempt := 0; ; attempt++ {
		out := h.attempt(w, r, ex, route, reqID, attempt)
		if out.done {
			return
		}
		if out.skip == nil {
			if out.failed != nil {
				h.relayFailure(w, ex.proto, out.failed)
			} else {
				writeError(w, ex.proto, apiError{status: http.StatusBadGateway, typ: errTypeServer, code: errCodeUpstream,
					message: "no target could serve the request"}, 0)
			}
			return
		}
		sk := out.skip
		if !clamped && h.clamp(w, ex, sk) {
			clamped = true
			continue
		}
		if !waited && h.wait(r, ex, sk, reqID) {
			waited = true
			continue
		}
		sk.write(w, ex.proto, h.cfg.Now())
		return
	}
}

// outcome is how one pass over the targets ended: served (done), or
// with the soonest-retryable skip, or with an upstream failure.
type outcome struct {
	done   bool
	skip   *skip
	failed *providers.Error
}

// skip is why a target was not called: a rule refused it, or its provider
// asked to be left alone until a time (a cooldown).
type skip struct {
	wait      time.Duration
	retryable bool
	decision  *limiter.Decision
	cooldown  *cooldown
	pause     *limiter.Pause
}

type cooldown struct {
	target providers.Target
	until  time.Time
}

func (a *skip) sooner(b *skip) bool {
	if a.retryable != b.retryable {
		return a.retryable
	}
	return a.wait < b.wait
}

func (sk *skip) write(w http.ResponseWriter, proto providers.Protocol, now time.Time) {
	if sk.decision != nil {
		writeRefusal(w, proto, *sk.decision)
		return
	}
	if sk.pause != nil {
		writePause(w, proto, *sk.pause, sk.wait)
		return
	}
	writeCooldown(w, proto, sk.cooldown, now)
}

func (h *Handler) attempt(w http.ResponseWriter, r *http.Request, ex *exchange, route providers.Route, reqID string, attempt int) outcome {
	ctx := r.Context()
	targets := h.order(route)
	cooling := h.cooldownsOf(ctx, targets)
	var best *skip
	consider := func(sk *skip) {
		if best == nil || sk.sooner(best) {
			best = sk
		}
	}
	var failed *providers.Error
	for i, t := range targets {
		now := h.cfg.Now()
		if until, ok := cooling[cooldownKey(t)]; ok && until.After(now) {
			h.log.Info("skipped: provider cooling down after a 429", "request_id", reqID, "provider", t.Provider.Name(),
				"target_model", t.Model, "until", until, "next_target", true)
			consider(&skip{wait: until.Sub(now), retryable: true, cooldown: &cooldown{target: t, until: until}})
			continue
		}
		price, _ := h.cfg.Prices.Lookup(t.Provider.Name(), t.Model)
		lr := limiter.Request{
			ID: leaseID(reqID, attempt, i),
			Subject: limiter.Subject{UserPath: ex.caller.UserPath, Provider: t.Provider.Name(), Model: t.Model,
				Key: ex.caller.KeyID, Tags: ex.caller.Tags},
			Route:          ex.op.String(),
			InputTokens:    ex.chargedInput(),
			OutputTokens:   h.reservation(ctx, ex, t.Model),
			OutputBurndown: burndownOf(t),
			Price:          price,
			UserPathOnly:   ex.userPathOnly,
			Class:          ex.caller.Class,
		}
		if ex.session {
			lr.LeaseTTL = h.cfg.RealtimeMaxSession
		}
		if h.cfg.Pauses != nil {
			if p, paused := limiter.Paused(h.cfg.Pauses(), now, lr.Subject); paused {
				h.cfg.Metrics.Count(metrics.Refused, 1, "Rule", p.ID(), "Reason", "paused")
				h.log.Info("refused: paused", "request_id", reqID, "user_path", ex.caller.UserPath, "provider", t.Provider.Name(),
					"target_model", t.Model, "pause", p.ID(), "reason", p.Reason, "next_target", !p.Consumer())
				sk := &skip{pause: &p, retryable: !p.Until.IsZero(), wait: p.Until.Sub(now)}
				if p.Consumer() {
					return outcome{skip: sk}
				}
				consider(sk)
				continue
			}
		}
		d, err := limiter.Decision{Allowed: true}, error(nil)
		if !ex.free {
			err = h.storeCall(ctx, func(ctx context.Context) (err error) {
				d, err = h.cfg.Limiter.Admit(ctx, now, lr)
				return err
			})
			h.cfg.Metrics.Observe(metrics.AdmissionLatency, float64(h.cfg.Now().Sub(now).Microseconds())/1000, "Milliseconds")
		}
		if err != nil {
			h.cfg.Metrics.Count(metrics.StoreFailures, 1)
			if !h.cfg.FailOpen {
				h.log.Error("refused: limit store unavailable (failure mode closed)",
					"request_id", reqID, "user_path", ex.caller.UserPath, "err", err)
				writeError(w, ex.proto, apiError{status: http.StatusServiceUnavailable, typ: errTypeOverloaded, code: errCodeServiceUnavailable,
					message: "the gateway cannot check rate limits right now; nothing was sent upstream, try again shortly"}, time.Second)
				return outcome{done: true}
			}
			h.log.Warn("admitted without limits: limit store unavailable (failure mode open)",
				"request_id", reqID, "user_path", ex.caller.UserPath, "provider", t.Provider.Name(), "err", err)
			h.failOpenAdmits.Add(1)
			h.cfg.Metrics.Count(metrics.FailOpenAdmissions, 1)
			d = limiter.Decision{Allowed: true}
		}
		h.logShadow(reqID, ex, t, d)
		if !d.Allowed {
			h.logRefusal(reqID, ex, t, d)
			sk := &skip{wait: d.Refused.RetryAfter, retryable: d.Refused.Retryable, decision: &d}
			if consumerScope(d.Refused.Scope()) {
				return outcome{skip: sk} // no other target can help
			}
			consider(sk)
			continue
		}
		h.cfg.Metrics.Count(metrics.Admitted, 1, "Route", ex.op.String(), "Provider", t.Provider.Name())
		for _, q := range []struct {
			dim string
			q   limiter.Quota
		}{{"requests", d.Requests}, {"tokens", d.Tokens}} {
			if q.q.IsSet() && q.q.Remaining*5 <= q.q.Limit {
				h.cfg.Metrics.Count(metrics.NearLimit, 1, "Route", ex.op.String(), "Dimension", q.dim)
			}
		}
		perr := h.forward(w, r, ex, t, d, reqID)
		if perr == nil || perr == errClientGone {
			return outcome{done: true}
		}
		if perr.RateLimited() {
			h.cfg.Metrics.Count(metrics.UpstreamRateLimited, 1, "Provider", t.Provider.Name())
			h.observeUpstream429(ex, t, perr)
			h.coolDown(ctx, t, perr.Limits, "answered 429")
		}
		failed = perr
		if !perr.Retryable() {
			break
		}
	}
	return outcome{skip: best, failed: failed}
}

// reservation is the output a request reserves at a target: its cap (or
// the default), never more than the model can produce (or the configured
// maximum), times the completions it asks for.
func (h *Handler) reservation(ctx context.Context, ex *exchange, model string) int64 {
	if ex.session {
		return min(ex.reserveOut, limiter.MaxAmount) // a whole session's, not one answer's
	}
	out := min(ex.reserveOut, h.cfg.MaxOutputTokens)
	if out > 0 && h.cfg.Estimates != nil && (ex.maxTokens <= 0 || h.cfg.AdaptiveCapped) {
		var est Estimate
		var ok bool
		_ = h.storeCall(ctx, func(ctx context.Context) error {
			est, ok = h.cfg.Estimates.OutputEstimate(ctx, ex.op.String(), model, ex.caller.KeyID)
			return ctx.Err()
		})
		if ok {
			out = max(est.P95, h.cfg.AdaptiveFloor)
			if ex.maxTokens > 0 {
				out = min(out, ex.maxTokens)
			}
			out = min(out, h.cfg.MaxOutputTokens)
		}
	}
	if m, ok := providers.MaxOutputTokens(model); ok {
		out = min(out, m)
	}
	return min(limiter.SatMul(out, max(ex.choices, 1)), limiter.MaxAmount)
}

// burndownOf is how many quota tokens an output token of target t counts
// for, for rules of Bedrock's quota: the provider's burndown, else 1.
func burndownOf(t providers.Target) int64 {
	if b, ok := t.Provider.(providers.Burndowner); ok {
		return min(max(b.OutputBurndown(t.Model), 1), limiter.MaxBurndown)
	}
	return 1
}

// leaseID names the lease of one attempt at one target: the request id
// made compact (its first 12 bytes, base64url), so that a slot, which
// holds its lease's id, costs as little as it can.
func leaseID(reqID string, attempt, target int) string {
	id := reqID
	if b, err := hex.DecodeString(reqID); err == nil && len(b) >= 12 {
		id = base64.RawURLEncoding.EncodeToString(b[:12])
	}
	if len(id) > 40 {
		id = id[:40]
	}
	return id + "." + strconv.Itoa(attempt) + "." + strconv.Itoa(target)
}

// order returns the targets in the order to try them: as configured for
// failover, drawn by weight for a weighted alias.
func (h *Handler) order(rt providers.Route) []providers.Target {
	if rt.Strategy != providers.Weighted || len(rt.Targets) < 2 {
		return rt.Targets
	}
	rest := slices.Clone(rt.Targets)
	out := make([]providers.Target, 0, len(rest))
	for len(rest) > 0 {
		total := 0
		for _, t := range rest {
			total += t.Weight
		}
		x := h.cfg.Rand() * float64(total)
		i := 0
		for acc := float64(rest[0].Weight); i < len(rest)-1 && x >= acc; acc += float64(rest[i].Weight) {
			i++
		}
		out = append(out, rest[i])
		rest = slices.Delete(rest, i, i+1)
	}
	return out
}

// forward sends an admitted request to target t and records its usage. It
// returns the provider's error when the upstream failed before anything
// was written, so the caller can fail over.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, ex *exchange, t providers.Target, d limiter.Decision, reqID string) *providers.Error {
	start := h.cfg.Now()
	hdr := w.Header()
	setRateHeaders(hdr, d)
	setPolicyHeaders(hdr, d)
	hdr.Set("X-Tollgate-Provider", t.Provider.Name())
	hdr.Set("X-Tollgate-Model", t.Model)
	tw := &trackingWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: h.cfg.StreamWriteTimeout}
	var out http.ResponseWriter = tw
	var held *sessionWriter
	stopRenewing := func() {}
	if ex.session {
		held = &sessionWriter{ResponseWriter: tw, own: "tgs_" + reqID}
		out = held
	} else {
		stopRenewing = h.renewWhileRunning(r.Context(), d.Lease, reqID)
	}
	res, err := t.Provider.Serve(r.Context(), out, &providers.Request{
		Op:          ex.op,
		Model:       t.Model,
		Stream:      ex.stream,
		Body:        ex.body,
		Path:        ex.path,
		Query:       ex.query,
		Method:      ex.method,
		Header:      ex.header,
		InputTokens: ex.inputTokens,
		MaxTokens:   ex.maxTokens,
		Class:       ex.caller.Class,
	})
	stopRenewing()
	sessionID := ""
	if held != nil {
		sessionID = held.finish(res.SessionID)
	}
	if res.BatchID != "" && h.cfg.Batches != nil {
		h.recordBatch(r.Context(), ex, t, res.BatchID, reqID)
	}
	used := limiter.Usage{
		InputTokens:       res.Usage.InputTokens,
		OutputTokens:      res.Usage.OutputTokens,
		CachedInputTokens: res.Usage.CachedInputTokens,
		CachedInInput:     res.Usage.CachedInInput,
		Exact:             res.Usage.Reported,

		CacheWriteInputTokens: res.Usage.CacheWriteInputTokens,
	}
	if !used.Exact && used.InputTokens == 0 {
		// The prompt went out whole even if the answer broke off.
		used.InputTokens = ex.chargedInput()
	}
	var perr *providers.Error
	if err != nil && !tw.wrote {
		if !errors.As(err, &perr) {
			perr = &providers.Error{Provider: t.Provider.Name(), Err: err}
		}
		// An upstream that answered with an error status used nothing; one
		// that timed out may have, so its reservation is kept.
		used = limiter.Usage{Exact: perr.Status != 0}
	}
	clientGone := r.Context().Err() != nil
	if !(ex.session && perr == nil && h.holdSession(r.Context(), ex, t, d.Lease, res, sessionID, reqID)) {
		h.complete(r.Context(), d.Lease, used, reqID)
	}
	if perr == nil {
		h.observeCompletion(ex, t, d.Lease, used)
	}
	if perr == nil {
		h.coolDownIfExhausted(r.Context(), t, res.Limits)
		if !ex.stream && res.Status/100 == 2 {
			took := h.cfg.Now().Sub(start)
			h.lat.record(cooldownKey(t), start, took)
			h.lat.record(providerKey(t), start, took)
		}
	}
	status := res.Status
	if perr != nil {
		status = perr.Status
	}
	// Typed attributes: the line is written on every request, and boxing
	// its values would cost an allocation each.
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "request finished",
		slog.String("request_id", reqID),
		slog.String("user_path", ex.caller.UserPath),
		slog.String("route", ex.op.String()),
		slog.String("model", ex.model),
		slog.String("provider", t.Provider.Name()),
		slog.String("target_model", t.Model),
		slog.Bool("stream", ex.stream),
		slog.Int("status", status),
		slog.Int64("estimate_input_tokens", ex.inputTokens),
		slog.Int64("used_input_tokens", used.InputTokens),
		slog.Int64("used_output_tokens", used.OutputTokens),
		slog.Int64("cached_input_tokens", used.CachedInputTokens),
		slog.Int64("cache_write_input_tokens", used.CacheWriteInputTokens),
		slog.Bool("usage_reported", used.Exact),
		slog.Bool("client_gone", clientGone),
		slog.Int64("duration_ms", h.cfg.Now().Sub(start).Milliseconds()),
	)
	switch {
	case perr != nil && clientGone:
		// The client's own cancellation (or the function's deadline) is no
		// failure of the upstream's, and nobody is left to fail over for.
		h.log.Info("client went away before the answer", "request_id", reqID, "provider", t.Provider.Name(),
			"err", r.Context().Err().Error())
		return errClientGone
	case perr != nil:
		h.log.Warn("upstream failed before answering",
			"request_id", reqID, "provider", t.Provider.Name(), "status", perr.Status, "err", perr.Error(), "will_fail_over", perr.Retryable())
	}
	return perr
}

// errClientGone is forward's answer when the client left before the
// upstream answered: the request is over, with nothing to write.
var errClientGone = &providers.Error{Err: context.Canceled}

// complete records usage and gives back the lease's slots, even when the
// client has gone. A first attempt is made before the answer ends; if it
// fails (a short store outage), it is retried with backoff within
// CompletionTimeout, never past the request's own deadline: after the
// answer has ended when DetachCompletion is set (a local process), before
// it otherwise (Lambda, whose environment freezes once the handler
// returns). Completion is idempotent, so a retry after a write that landed
// changes nothing. If every attempt fails, the slot is given back at the
// lease's expiry.
func (h *Handler) complete(ctx context.Context, lease *limiter.Lease, used limiter.Usage, reqID string) {
	if lease == nil {
		return
	}
	budget := h.cfg.CompletionTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-time.Second)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(budget, time.Second))
	first, cancelFirst := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	err := h.cfg.Limiter.Complete(first, h.cfg.Now(), lease, used)
	cancelFirst()
	if err == nil {
		cancel()
		return
	}
	h.log.Warn("could not record completion; retrying", "request_id", reqID, "lease", lease.ID, "err", err)
	retry := func() {
		defer cancel()
		h.retryCompletion(ctx, lease, used, reqID)
	}
	if h.cfg.DetachCompletion {
		h.pending.Go(retry)
		return
	}
	retry()
}

func (h *Handler) retryCompletion(ctx context.Context, lease *limiter.Lease, used limiter.Usage, reqID string) {
	for attempt := 1; ; attempt++ {
		wait := completionBackoff(attempt)
		if dl, _ := ctx.Deadline(); time.Until(dl) < wait {
			h.log.Error("could not record completion; the slot frees at lease expiry", "request_id", reqID, "lease", lease.ID,
				"attempts", attempt, "expires_at", lease.ExpiresAt)
			return
		}
		if sleep(ctx, wait) != nil {
			return
		}
		if err := h.cfg.Limiter.Complete(ctx, h.cfg.Now(), lease, used); err == nil {
			h.log.Info("recorded the completion after retrying", "request_id", reqID, "lease", lease.ID, "attempts", attempt+1)
			return
		}
	}
}

// WaitCompletions waits for completions still being retried after their
// answers ended, until ctx is done: for a local process's shutdown.
func (h *Handler) WaitCompletions(ctx context.Context) {
	done := make(chan struct{})
	go func() { h.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// completionBackoff is the wait before completion retry attempt+1: 100 ms
// doubling to 1 s, jittered, so a completion lands within about a second
// of the store coming back.
func completionBackoff(attempt int) time.Duration {
	d := min(100*time.Millisecond<<min(attempt, 4), time.Second)
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// renewWhileRunning renews a lease every third of its TTL while the
// request runs, so a long stream keeps its slot; the returned function
// stops it. A lease that could not be renewed in time no longer holds its
// slot (it is logged); the request goes on.
func (h *Handler) renewWhileRunning(ctx context.Context, lease *limiter.Lease, reqID string) func() {
	if lease == nil || !slices.ContainsFunc(lease.Charges, func(c limiter.Charge) bool { return c.Counter.Kind == limiter.KindInFlight }) {
		return func() {}
	}
	// A timer, not a goroutine: most requests end before the first
	// renewal is due, and cost one timer.
	r := &renewal{h: h, ctx: context.WithoutCancel(ctx), lease: lease, reqID: reqID, every: h.cfg.Limiter.LeaseTTL() / 3}
	r.mu.Lock()
	r.t = time.AfterFunc(r.every, r.renew)
	r.mu.Unlock()
	return r.stop
}

// renewal renews one running request's lease on a timer.
type renewal struct {
	h       *Handler
	ctx     context.Context
	lease   *limiter.Lease
	reqID   string
	every   time.Duration
	mu      sync.Mutex // held while renewing, so stop waits for it
	t       *time.Timer
	stopped bool
}

func (r *renewal) renew() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.every/2)
	ok, err := r.h.cfg.Limiter.Renew(ctx, r.h.cfg.Now(), r.lease)
	cancel()
	switch {
	case err != nil:
		r.h.log.Warn("could not renew a running request's lease; trying again", "request_id", r.reqID, "lease", r.lease.ID, "err", err)
	case !ok:
		r.h.log.Warn("a running request's lease had expired; it no longer holds its slot", "request_id", r.reqID, "lease", r.lease.ID)
		return
	}
	r.t.Reset(r.every)
}

func (r *renewal) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.t.Stop()
}

// recordBatch records who submitted a batch. A batch that cannot be
// recorded still runs, uncharged: the error is logged for an operator.
func (h *Handler) recordBatch(ctx context.Context, ex *exchange, t providers.Target, id, reqID string) {
	b := BatchRecord{Provider: t.Provider.Name(), ID: id, UserPath: ex.caller.UserPath, KeyID: ex.caller.KeyID, Tags: ex.caller.Tags, SubmittedAt: h.cfg.Now()}
	rctx, cancel := h.storeContext(ctx)
	defer cancel()
	if err := h.cfg.Batches.RecordBatch(rctx, b); err != nil {
		h.log.Error("could not record a submitted batch; its usage will not be charged", "request_id", reqID, "provider", b.Provider, "batch", id, "err", err)
		return
	}
	h.log.Info("batch recorded for charging when it ends", "request_id", reqID, "provider", b.Provider, "batch", id, "user_path", b.UserPath)
}

// consumerScope reports whether a rule of scope s limits the caller, so
// that no other target can help a request it refuses.
func consumerScope(s limiter.Scope) bool {
	return s == limiter.ScopeUserPath || s == limiter.ScopeTag || s == limiter.ScopeKey
}

// logShadow logs and counts the refusals shadow rules would have made.
func (h *Handler) logShadow(reqID string, ex *exchange, t providers.Target, d limiter.Decision) {
	for i := range d.Shadow {
		r := &d.Shadow[i]
		h.shadowRefusals.Add(1)
		h.log.Info("shadow rule would have refused",
			"request_id", reqID,
			"user_path", ex.caller.UserPath,
			"provider", t.Provider.Name(),
			"target_model", t.Model,
			"rule", ruleName(r),
			"dimension", r.Kind.String(),
			"limit", r.Limit,
			"asked", r.Amount,
			"retry_after_ms", r.RetryAfter.Milliseconds(),
			"admitted", d.Allowed,
		)
	}
}

func (h *Handler) logRefusal(reqID string, ex *exchange, t providers.Target, d limiter.Decision) {
	r := d.Refused
	reason := "rate_limit"
	if r.IsBudget() {
		reason = "budget"
	}
	h.cfg.Metrics.Count(metrics.Refused, 1, "Rule", ruleName(r), "Reason", reason)
	h.observeRefusal(ex, t, d)
	h.log.Info("refused",
		"request_id", reqID,
		"user_path", ex.caller.UserPath,
		"route", ex.op.String(),
		"model", ex.model,
		"provider", t.Provider.Name(),
		"target_model", t.Model,
		"rule", ruleName(r),
		"dimension", r.Kind.String(),
		"limit", r.Limit,
		"asked", r.Amount,
		"retry_after_ms", r.RetryAfter.Milliseconds(),
		"retryable", r.Retryable,
		"next_target", !consumerScope(r.Scope()),
	)
}

// relayFailure answers with an upstream failure when no target served.
func (h *Handler) relayFailure(w http.ResponseWriter, proto providers.Protocol, e *providers.Error) {
	msg := upstreamMessage(e)
	switch {
	case e.RateLimited():
		hdr := w.Header()
		hdr.Set(headerDecision, DecisionUpstreamRateLimited)
		if e.Limits.RetryAfter > 0 {
			setRetryAfter(hdr, e.Limits.RetryAfter)
		}
		writeError(w, proto, apiError{status: http.StatusTooManyRequests, typ: errTypeRateLimit, code: errCodeRateLimitExceeded,
			message: "provider " + e.Provider + " is rate limiting: " + msg, decision: DecisionUpstreamRateLimited}, e.Limits.RetryAfter)
	case e.Status == 0:
		status := http.StatusBadGateway
		if errors.Is(e.Err, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
		writeError(w, proto, apiError{status: status, typ: errTypeServer, code: errCodeUpstream,
			message: "provider " + e.Provider + " could not be reached: " + msg}, 0)
	case e.Status >= 500:
		writeError(w, proto, apiError{status: http.StatusBadGateway, typ: errTypeServer, code: errCodeUpstream,
			message: "provider " + e.Provider + " failed with status " + strconv.Itoa(e.Status) + ": " + msg}, 0)
	default:
		typ := errTypeInvalidRequest
		switch e.Status {
		case http.StatusUnauthorized:
			typ = errTypeAuthentication
		case http.StatusForbidden:
			typ = errTypePermission
		case http.StatusNotFound:
			typ = errTypeNotFound
		}
		if errors.Is(e.Err, providers.ErrUnsupported) {
			writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, code: errCodeNotSupported,
				message: "provider " + e.Provider + ": " + msg}, 0)
			return
		}
		writeError(w, proto, apiError{status: e.Status, typ: typ, message: "provider " + e.Provider + ": " + msg}, 0)
	}
}

// trackingWriter notes whether the response was started, so a provider
// error after that is not mistaken for one that allows failover, and puts
// a deadline on every write, so a client that stops reading gets its
// connection closed rather than holding a slot.
type trackingWriter struct {
	http.ResponseWriter
	wrote   bool
	rc      *http.ResponseController
	timeout time.Duration // 0: no deadlines (not supported, or off)
	armed   time.Time     // when the write deadline was last moved
}

func (t *trackingWriter) WriteHeader(code int) {
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(p []byte) (int, error) {
	t.wrote = true
	t.arm()
	return t.ResponseWriter.Write(p)
}

// Flush sends what was written, within the write deadline too.
func (t *trackingWriter) Flush() {
	t.arm()
	if t.rc != nil {
		_ = t.rc.Flush()
	}
}

// arm moves the write deadline to timeout from now, at most every tenth
// of it (a deadline per chunk would cost a syscall per chunk). A writer
// with no deadlines (httptest, Lambda) is left alone.
func (t *trackingWriter) arm() {
	if t.timeout <= 0 || t.rc == nil {
		return
	}
	now := time.Now()
	if now.Sub(t.armed) < t.timeout/10 {
		return
	}
	if err := t.rc.SetWriteDeadline(now.Add(t.timeout)); err != nil {
		t.timeout = 0 // not supported: do not ask again
		return
	}
	t.armed = now
}

func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// upstreamMessage extracts a readable message from an upstream error.
func upstreamMessage(e *providers.Error) string {
	if len(e.Body) > 0 {
		var b struct {
			Error   json.RawMessage `json:"error"`
			Message string          `json:"message"`
		}
		if json.Unmarshal(e.Body, &b) == nil {
			var inner struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(b.Error, &inner) == nil && inner.Message != "" {
				return inner.Message
			}
			var s string
			if json.Unmarshal(b.Error, &s) == nil && s != "" {
				return s
			}
			if b.Message != "" {
				return b.Message
			}
		}
	}
	if e.Err != nil {
		return e.Err.Error()
	}
	return http.StatusText(e.Status)
}
