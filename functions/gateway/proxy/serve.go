package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// exchange is one client request, parsed as far as admission needs.
type exchange struct {
	proto       providers.Protocol
	op          providers.Op
	model       string // as the client named it
	body        []byte
	once        bool // body is JSON with each member once (jsonx.Check)
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
	// capField is the body field that carries the client's output cap.
	capField string

	// For audio and passthrough calls.
	method, path, query string
	header              http.Header
	// route, when set, is the resolution to use instead of the model's
	// (passthrough names its provider in the URL).
	route *providers.Route
	// answer is the answer's header, where a clamp is announced.
	answer http.Header
	// said holds the values of the answer's headers that name the request,
	// its provider and its model (one array for the three, shared by the
	// header slices).
	said [3]string
}

// chargedInput is the input a request reserves.
func (ex *exchange) chargedInput() int64 {
	if ex.free {
		return 0
	}
	return ex.inputTokens
}

// serve asks admission what ex gets, step by step, and does it: forwards
// it to the target that admitted it (reporting back how the upstream
// answered, so that admission can fail over), or answers with the
// refusal, the store's unavailability or the upstream's failure.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, ex *exchange) {
	ctx := r.Context()
	if ex.header == nil {
		ex.header = r.Header
	}
	ex.inputTokens = min(max(ex.inputTokens, 0), limiter.MaxAmount)
	reqID := h.cfg.NewID()
	adm, err := h.adm.Begin(ctx, h.admissionRequest(w, ex, reqID))
	if err != nil {
		writeError(w, ex.proto, apiError{status: http.StatusNotFound, typ: errTypeNotFound, code: errCodeModelNotFound, param: "model",
			message: "the model `" + ex.model + "` does not exist or is not served by this gateway"}, 0)
		return
	}
	ex.said[0] = reqID
	w.Header()["X-Request-Id"] = ex.said[0:1:1]
	for forwarded := false; ; {
		st := adm.Next(ctx)
		switch st.Kind {
		case admission.Forward:
			if forwarded {
				clearHeaders(w.Header(), forwardHeaders) // the earlier attempt's
			}
			forwarded = true
			if st.DowngradedFrom != "" {
				w.Header().Set(HeaderDowngradedFrom, st.DowngradedFrom)
			}
			if st.Migration != "" {
				w.Header().Set(HeaderMigration, st.Migration)
			}
			limits, perr := h.forward(w, r, ex, st, reqID)
			if perr == errClientGone || perr == errAnswered {
				return
			}
			adm.Answered(ctx, st.Target, limits, perr)
			if perr == nil {
				return
			}
			continue
		case admission.Refuse:
			writeRefuse(w, ex.proto, st, ex.model, h.cfg.Now())
		case admission.Unavailable:
			writeError(w, ex.proto, apiError{status: http.StatusServiceUnavailable, typ: errTypeOverloaded, code: errCodeServiceUnavailable,
				message: "the gateway cannot check rate limits right now; nothing was sent upstream, try again shortly"}, time.Second)
		case admission.Failed:
			if st.Failure != nil {
				h.relayFailure(w, ex.proto, st.Failure)
			} else {
				writeError(w, ex.proto, apiError{status: http.StatusBadGateway, typ: errTypeServer, code: errCodeUpstream,
					message: "no target could serve the request"}, 0)
			}
		}
		return
	}
}

// admissionRequest is what admission needs of ex; ex is its Body.
func (h *Handler) admissionRequest(w http.ResponseWriter, ex *exchange, reqID string) admission.Request {
	ex.answer = w.Header()
	return admission.Request{
		ID: reqID, Model: ex.model, Route: ex.route, Op: ex.op, Stream: ex.stream,
		Caller:      admission.Caller{UserPath: ex.caller.UserPath, KeyID: ex.caller.KeyID, Tags: ex.caller.Tags, Class: ex.caller.Class},
		InputTokens: ex.inputTokens, MaxTokens: ex.maxTokens, Choices: ex.choices,
		UserPathOnly: ex.userPathOnly, NoOutput: ex.noOutput, Free: ex.free, Session: ex.session,
		Body: ex,
	}
}

// Needs implements admission.Body: what ex's body asks of a model.
func (ex *exchange) Needs() admission.Needs { return needsOf(ex.op, ex.body) }

// Clamp implements admission.Body: it lowers ex's output cap where the
// upstream reads it, and announces it.
func (ex *exchange) Clamp(n int64) bool {
	if ex.proto == providers.ProtocolGemini {
		return false // its cap is generationConfig.maxOutputTokens, nested: not lowered
	}
	body, err := providers.SetModel(ex.body, "", map[string]any{ex.capFieldName(): n})
	if err != nil {
		return false
	}
	ex.body, ex.maxTokens = body, n
	ex.answer.Set(HeaderClamped, strconv.FormatInt(n, 10))
	return true
}

// HeaderDowngradedFrom names, on an answer, the target ("provider/model")
// a downgrade took the request from.
const HeaderDowngradedFrom = "X-Tollgate-Downgraded-From"

// HeaderMigration names, on an answer, the migration whose target served
// it.
const HeaderMigration = "X-Tollgate-Migration"

// HeaderClamped announces that the gateway lowered a request's output cap
// to fit the token budget.
const HeaderClamped = "X-Tollgate-Max-Tokens-Clamped"

// capFieldName is the body member that carries ex's output cap.
func (ex *exchange) capFieldName() string {
	switch {
	case ex.op == providers.OpResponses:
		return "max_output_tokens"
	case ex.capField != "":
		return ex.capField
	}
	return "max_tokens"
}

// writeRefuse answers a Refuse step: with why the target admission
// settled on was skipped (a rule's refusal, a pause, a cooldown), and
// when other targets were skipped as incompatible, as
// no_compatible_target with each one's reason.
func writeRefuse(w http.ResponseWriter, proto providers.Protocol, st admission.Step, model string, now time.Time) {
	sk := st.Refusal
	if sk == nil {
		w.Header().Set(headerDecision, DecisionNoCompatibleTarget)
		writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, code: DecisionNoCompatibleTarget,
			message:  "no target of `" + model + "` can take this request: " + incompatibleReasons(st.Incompatible),
			decision: DecisionNoCompatibleTarget}, 0)
		return
	}
	var e apiError
	var delay time.Duration
	switch sk.Reason {
	case admission.SkipRefused:
		e, delay = refusalError(w.Header(), *sk.Decision)
	case admission.SkipPaused:
		e, delay = pauseError(w.Header(), *sk.Pause, sk.Wait)
	default:
		e, delay = cooldownError(w.Header(), sk.Target, sk.Until, now)
	}
	if len(st.Incompatible) > 0 {
		e.decision = DecisionNoCompatibleTarget
		e.message += "; no other target can take the request: " + incompatibleReasons(st.Incompatible)
		w.Header().Set(headerDecision, DecisionNoCompatibleTarget)
	}
	writeError(w, proto, e, delay)
}

// DecisionNoCompatibleTarget is x-tollgate-decision (and the error's
// code) of a request whose first choice refused it and whose other
// targets cannot take it.
const DecisionNoCompatibleTarget = "no_compatible_target"

// incompatibleReasons names each incompatible target and why.
func incompatibleReasons(skips []admission.Skip) string {
	var b strings.Builder
	for i, sk := range skips {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(sk.Target.String() + ": " + sk.Why)
	}
	return b.String()
}

// forward sends an admitted request to target t and records its usage. It
// returns the provider's error when the upstream failed before anything
// was written, so the caller can fail over.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, ex *exchange, st admission.Step, reqID string) (providers.UpstreamLimits, *providers.Error) {
	t, d := st.Target, st.Decision
	start := h.cfg.Now()
	hdr := w.Header()
	setRateHeaders(hdr, d)
	setPolicyHeaders(hdr, d)
	ex.said[1], ex.said[2] = t.Provider.Name(), t.Model
	hdr["X-Tollgate-Provider"], hdr["X-Tollgate-Model"] = ex.said[1:2:2], ex.said[2:3:3]
	tw := newTrackingWriter(w, h.cfg.StreamWriteTimeout)
	var out http.ResponseWriter = tw
	var held *sessionWriter
	var renewing *renewal
	if ex.session {
		held = &sessionWriter{ResponseWriter: tw, own: "tgs_" + reqID}
		out = held
	} else {
		renewing = h.renewWhileRunning(r.Context(), d.Lease, reqID)
	}
	ctx, stopStream := streamContext(r.Context(), ex, st.Stream)
	res, err := t.Provider.Serve(ctx, out, &providers.Request{
		Op:          ex.op,
		Model:       t.Model,
		Stream:      ex.stream,
		Body:        ex.body,
		Once:        ex.once,
		Path:        ex.path,
		Query:       ex.query,
		Method:      ex.method,
		Header:      ex.header,
		InputTokens: ex.inputTokens,
		MaxTokens:   ex.maxTokens,
		Class:       ex.caller.Class,
	})
	// Whether the duration ended the stream is read as Serve returns:
	// a timer firing after a stream ended on its own must not add an
	// error to it.
	cut := streamCut(ctx, r.Context())
	stopStream()
	renewing.stop()
	if cut {
		h.endStream(out, ex, st.Stream, reqID, tw.wrote)
	}
	sessionID := ""
	if held != nil {
		sessionID = held.finish(res.SessionID)
	}
	if res.BatchID != "" && h.cfg.Batches != nil {
		h.recordBatch(r.Context(), ex, t, res.BatchID, reqID)
	}
	used, perr := usageOf(ex, t, res, err, tw.wrote)
	if cut {
		perr = nil // the gateway ended it: nothing to fail over
	}
	clientGone := r.Context().Err() != nil
	end := h.cfg.Now()
	if !(ex.session && perr == nil && h.holdSession(r.Context(), ex, t, d.Lease, res, sessionID, reqID)) {
		h.complete(r.Context(), end, d.Lease, used, reqID)
	}
	if perr == nil {
		h.observeCompletion(ex, t, d.Lease, used)
	}
	if perr == nil && !ex.stream && res.Status/100 == 2 {
		model, provider := latencyKeysOf(t)
		h.lat.record(model, start, end.Sub(start))
		h.lat.record(provider, start, end.Sub(start))
	}
	h.logFinished(r.Context(), reqID, ex, t, res.Status, perr, used, clientGone, h.cfg.Now().Sub(start))
	switch {
	case cut && !tw.wrote:
		return res.Limits, errAnswered
	case perr != nil && clientGone:
		// The client's own cancellation (or the function's deadline) is no
		// failure of the upstream's, and nobody is left to fail over for.
		h.log.Info("client went away before the answer", "request_id", reqID, "provider", t.Provider.Name(),
			"err", r.Context().Err().Error())
		return res.Limits, errClientGone
	case perr != nil:
		h.log.Warn("upstream failed before answering",
			"request_id", reqID, "provider", t.Provider.Name(), "status", perr.Status, "err", perr.Error(), "will_fail_over", perr.Retryable())
	}
	return res.Limits, perr
}

// usageOf is what a forwarded request used, and the provider's error
// when the upstream failed before anything was written (the request can
// then fail over): an upstream that answered with an error status used
// nothing; one that timed out may have, so its reservation is kept.
func usageOf(ex *exchange, t providers.Target, res providers.Result, err error, wrote bool) (limiter.Usage, *providers.Error) {
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
	if err == nil || wrote {
		return used, nil
	}
	var perr *providers.Error
	if !errors.As(err, &perr) {
		perr = &providers.Error{Provider: t.Provider.Name(), Err: err}
	}
	return limiter.Usage{Exact: perr.Status != 0}, perr
}

// logFinished writes the line of a finished request. Its attributes are
// typed: the line is written on every request, and boxing its values
// would cost an allocation each.
func (h *Handler) logFinished(ctx context.Context, reqID string, ex *exchange, t providers.Target, status int, perr *providers.Error,
	used limiter.Usage, clientGone bool, took time.Duration) {
	if perr != nil {
		status = perr.Status
	}
	h.log.LogAttrs(ctx, slog.LevelInfo, "request finished",
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
		slog.Int64("duration_ms", took.Milliseconds()),
	)
}

// errClientGone is forward's answer when the client left before the
// upstream answered: the request is over, with nothing to write.
var errClientGone = &providers.Error{Err: context.Canceled}

// errAnswered is forward's answer when the gateway itself answered (a
// stream cut at its duration before its first byte): nothing to fail
// over, nothing more to write.
var errAnswered = &providers.Error{Err: errStreamTooLong}

// complete records usage and gives back the lease's slots, even when the
// client has gone. A first attempt is made before the answer ends; if it
// fails (a short store outage), it is retried with backoff within
// CompletionTimeout, never past the request's own deadline: after the
// answer has ended when DetachCompletion is set (a local process), before
// it otherwise (Lambda, whose environment freezes once the handler
// returns). Completion is idempotent, so a retry after a write that landed
// changes nothing. If every attempt fails, the slot is given back at the
// lease's expiry.
func (h *Handler) complete(ctx context.Context, now time.Time, lease *limiter.Lease, used limiter.Usage, reqID string) {
	if lease == nil {
		return
	}
	if h.cfg.Limiter.InProcess() {
		// Its store cannot stall, nor fail but for a bug: no deadlines.
		if err := h.cfg.Limiter.Complete(context.WithoutCancel(ctx), now, lease, used); err != nil {
			h.log.Error("could not record completion", "request_id", reqID, "lease", lease.ID, "err", err)
		}
		return
	}
	budget := h.cfg.CompletionTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)-time.Second)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(budget, time.Second))
	first, cancelFirst := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	err := h.cfg.Limiter.Complete(first, now, lease, used)
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
		if admission.Sleep(ctx, wait) != nil {
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
// request runs, so a long stream keeps its slot, until the renewal it
// returns (nil when the lease holds no slot) is stopped. A lease that
// could not be renewed in time no longer holds its slot (it is logged);
// the request goes on.
func (h *Handler) renewWhileRunning(ctx context.Context, lease *limiter.Lease, reqID string) *renewal {
	if !lease.HoldsSlots() {
		return nil
	}
	// A timer, not a goroutine: most requests end before the first
	// renewal is due, and cost one timer, kept with its renewal for the
	// next request when it was stopped before it fired.
	r := renewals.Get().(*renewal)
	r.mu.Lock()
	r.h, r.ctx, r.lease, r.reqID, r.every, r.stopped = h, ctx, lease, reqID, h.cfg.Limiter.LeaseTTL()/3, false
	if r.t == nil {
		r.t = time.AfterFunc(r.every, r.renew)
	} else {
		r.t.Reset(r.every)
	}
	r.mu.Unlock()
	return r
}

// renewals keeps the renewals whose timers were stopped before they
// fired (Stop reported true), and so will not run their function again
// until reset.
var renewals = sync.Pool{New: func() any { return new(renewal) }}

// renewal renews one running request's lease on a timer.
type renewal struct {
	h       *Handler
	ctx     context.Context // the request's: cancelled or not, renewals go on
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.every/2)
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

// stop ends the renewals, waiting for one under way. A renewal whose
// timer it stops before it fires goes back to renewals: its function
// cannot run again until the next request resets it.
func (r *renewal) stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.stopped = true
	stopped := r.t.Stop()
	r.h, r.ctx, r.lease = nil, nil, nil
	r.mu.Unlock()
	if stopped {
		renewals.Put(r)
	}
}

// recordBatch records who submitted a batch. A batch that cannot be
// recorded still runs, uncharged: the error is logged for an operator.
func (h *Handler) recordBatch(ctx context.Context, ex *exchange, t providers.Target, id, reqID string) {
	b := BatchRecord{Provider: t.Provider.Name(), ID: id, UserPath: ex.caller.UserPath, KeyID: ex.caller.KeyID, Tags: ex.caller.Tags, SubmittedAt: h.cfg.Now()}
	rctx, cancel := h.adm.StoreContext(ctx)
	defer cancel()
	if err := h.cfg.Batches.RecordBatch(rctx, b); err != nil {
		h.log.Error("could not record a submitted batch; its usage will not be charged", "request_id", reqID, "provider", b.Provider, "batch", id, "err", err)
		return
	}
	h.log.Info("batch recorded for charging when it ends", "request_id", reqID, "provider", b.Provider, "batch", id, "user_path", b.UserPath)
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
	rc      http.ResponseController
	timeout time.Duration // 0: no deadlines (not supported, or off)
	armed   time.Time     // when the write deadline was last moved
}

// newTrackingWriter wraps w, with write deadlines timeout apart when w
// (or a writer it wraps) takes them.
func newTrackingWriter(w http.ResponseWriter, timeout time.Duration) *trackingWriter {
	if !takesDeadlines(w) {
		timeout = 0 // asked for one, such a writer answers with a new error each time
	}
	return &trackingWriter{ResponseWriter: w, rc: *http.NewResponseController(w), timeout: timeout}
}

// takesDeadlines reports whether w, or a writer it wraps, has write
// deadlines, as http.ResponseController looks for them.
func takesDeadlines(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case interface{ SetWriteDeadline(time.Time) error }:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
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
	_ = t.rc.Flush()
}

// arm moves the write deadline to timeout from now, at most every tenth
// of it (a deadline per chunk would cost a syscall per chunk). A writer
// with no deadlines (httptest, Lambda) is left alone.
func (t *trackingWriter) arm() {
	if t.timeout <= 0 {
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
