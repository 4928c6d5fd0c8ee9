package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// Realtime sessions run over a WebSocket between the client and the
// provider, which a Lambda behind API Gateway cannot hold. What the gateway
// can limit is the minting of their ephemeral credentials: one request,
// plus a slot of every concurrency rule held for the session's maximum
// duration (RealtimeMaxSession) and a token reservation per session
// (RealtimeSessionTokens), released early when the client ends the
// session. The secret passes through untouched.

func (h *Handler) realtime(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	var req struct {
		Model   string `json:"model"`
		Session struct {
			Model string `json:"model"`
		} `json:"session"`
	}
	caller, body, ok := h.beginJSON(w, r, proto, &req)
	if !ok {
		return
	}
	model := req.Session.Model
	if model == "" {
		model = req.Model
	}
	if model == "" {
		badRequest(w, proto, "session.model", "session.model is required: the gateway admits a session for its model")
		return
	}
	h.serve(w, r, &exchange{proto: proto, op: providers.OpRealtime, model: model, body: body, caller: caller,
		path: r.URL.Path, header: r.Header, session: true})
}

// holdSession keeps an admitted session's lease for its end, when the
// upstream minted credentials. It reports whether it did: if not, the
// request completes as any other.
func (h *Handler) holdSession(ctx context.Context, ex *exchange, t providers.Target, lease *limiter.Lease, res providers.Result, reqID string) bool {
	if lease == nil || res.Status/100 != 2 || res.SessionID == "" {
		return false
	}
	if h.cfg.Sessions != nil {
		err := h.cfg.Sessions.PutSession(context.WithoutCancel(ctx), SessionRecord{
			Provider: t.Provider.Name(), ID: res.SessionID, UserPath: ex.caller.UserPath, Lease: *lease})
		if err != nil {
			h.log.Warn("could not record a realtime session; its slot frees at its expiry", "request_id", reqID,
				"session", res.SessionID, "expires_at", lease.ExpiresAt, "err", err)
		}
	}
	h.log.Info("realtime session admitted", "request_id", reqID, "session", res.SessionID, "user_path", ex.caller.UserPath,
		"provider", t.Provider.Name(), "model", t.Model, "expires_at", lease.ExpiresAt)
	return true
}

// endSession handles POST /v1/realtime/sessions/{id}/end: the session's
// slots come back now instead of at its expiry, and its reservation is
// kept as what it used (the gateway does not see a session's usage). Only
// a caller whose user path is the session's or above it may end it.
func (h *Handler) endSession(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	caller, ok := h.authenticate(w, r, proto)
	if !ok {
		return
	}
	id := r.PathValue("id")
	unknown := func() {
		writeError(w, proto, apiError{status: http.StatusNotFound, typ: errTypeInvalidRequest, code: "session_not_found",
			message: "no realtime session " + id + " is held by this gateway (ended already, expired, or not admitted here)"}, 0)
	}
	if h.cfg.Sessions == nil {
		unknown()
		return
	}
	s, err := h.cfg.Sessions.TakeSession(r.Context(), id)
	switch {
	case errors.Is(err, ErrUnknownSession):
		unknown()
		return
	case err != nil:
		h.log.Error("could not read a realtime session", "session", id, "err", err)
		writeError(w, proto, apiError{status: http.StatusServiceUnavailable, typ: errTypeServer, code: errCodeServiceUnavailable,
			message: "the gateway cannot end the session right now; try again"}, 0)
		return
	}
	if !limiter.PathWithin(s.UserPath, caller.UserPath) {
		// Not this caller's: leave it as it was.
		if err := h.cfg.Sessions.PutSession(context.WithoutCancel(r.Context()), s); err != nil {
			h.log.Error("could not put back a realtime session another caller tried to end; its slot frees at its expiry",
				"session", id, "err", err)
		}
		unknown()
		return
	}
	used := s.Lease.Reserved
	used.Exact = true
	h.complete(r.Context(), &s.Lease, used, "session-"+id)
	h.log.Info("realtime session ended", "session", id, "user_path", s.UserPath, "held_ms", h.cfg.Now().Sub(s.Lease.AdmittedAt).Milliseconds())
	b, _ := json.Marshal(map[string]any{"id": id, "object": "realtime.session", "ended": true})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
