package proxy

import (
	"bytes"
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
	caller, body, ok := h.beginJSON(w, r, proto, &req, "model", "session")
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

// HeaderSessionID names, on an answer minting Realtime credentials, the
// session id the gateway accepts to end the session: the upstream's when
// its answer has one, else one the gateway made.
const HeaderSessionID = "X-Tollgate-Session-Id"

// maxSessionAnswer bounds the answer minting Realtime credentials that the
// gateway holds back to read its session id before the client sees it (a
// few hundred bytes in practice).
const maxSessionAnswer = 64 << 10

// sessionWriter holds back the answer minting a session's credentials, so
// that X-Tollgate-Session-Id can name the upstream's id before the answer
// goes out. Past maxSessionAnswer it stops holding back: the id is then
// the gateway's own, set before anything is written.
type sessionWriter struct {
	http.ResponseWriter
	own    string // the gateway's id, used when the upstream's cannot be
	status int
	body   bytes.Buffer
	passed bool // written through: the answer was too large to hold
}

func (s *sessionWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

func (s *sessionWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if !s.passed && s.body.Len()+len(p) <= maxSessionAnswer {
		return s.body.Write(p)
	}
	if !s.passed {
		s.passed = true
		s.ResponseWriter.Header().Set(HeaderSessionID, s.own)
		s.ResponseWriter.WriteHeader(s.status)
		if _, err := s.ResponseWriter.Write(s.body.Bytes()); err != nil {
			return 0, err
		}
	}
	return s.ResponseWriter.Write(p)
}

// Flush is held back with the answer.
func (s *sessionWriter) Flush() {}

func (s *sessionWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// finish writes the held-back answer under the session id it returns: the
// upstream's (upstream, when set) or the gateway's own. Nothing is written
// when the upstream wrote nothing (it failed before answering).
func (s *sessionWriter) finish(upstream string) string {
	if s.passed {
		return s.own
	}
	if s.status == 0 {
		return ""
	}
	id := s.own
	if upstream != "" && len(upstream) <= 256 {
		id = upstream
	}
	if s.status/100 == 2 {
		s.ResponseWriter.Header().Set(HeaderSessionID, id)
	}
	s.ResponseWriter.WriteHeader(s.status)
	_, _ = s.ResponseWriter.Write(s.body.Bytes())
	return id
}

// holdSession keeps an admitted session's lease for its end, when the
// upstream minted credentials, under the session's id (the upstream's, or
// the gateway's when the answer has none): the slot is held until the
// client ends the session or the lease expires, whatever the answer's
// shape. It reports whether it did: if not, the request completes as any
// other.
func (h *Handler) holdSession(ctx context.Context, ex *exchange, t providers.Target, lease *limiter.Lease, res providers.Result, id, reqID string) bool {
	if lease == nil || res.Status/100 != 2 || id == "" {
		return false
	}
	if h.cfg.Sessions != nil {
		sctx, cancel := h.adm.StoreContext(ctx)
		err := h.cfg.Sessions.PutSession(sctx, SessionRecord{
			Provider: t.Provider.Name(), ID: id, UserPath: ex.caller.UserPath, Lease: *lease})
		cancel()
		if err != nil {
			h.log.Warn("could not record a realtime session; its slot frees at its expiry", "request_id", reqID,
				"session", id, "expires_at", lease.ExpiresAt, "err", err)
		}
	}
	h.log.Info("realtime session admitted", "request_id", reqID, "session", id, "upstream_id", res.SessionID != "" && res.SessionID == id,
		"user_path", ex.caller.UserPath, "provider", t.Provider.Name(), "model", t.Model, "expires_at", lease.ExpiresAt)
	return true
}

// endSession handles POST /v1/realtime/sessions/{id}/end: the session's
// slots come back now instead of at its expiry, and its reservation is
// kept as what it used (the gateway does not see a session's usage). Only
// a caller whose user path is the session's or above it may end it;
// another caller's attempt changes nothing (one conditional write).
func (h *Handler) endSession(w http.ResponseWriter, r *http.Request) {
	const proto = providers.ProtocolOpenAI
	caller, ok := h.authenticate(w, r, proto)
	if !ok {
		return
	}
	id := r.PathValue("id")
	unknown := func() {
		writeError(w, proto, apiError{status: http.StatusNotFound, typ: errTypeInvalidRequest, code: "session_not_found",
			message: "no realtime session " + id + " is held by this gateway for " + caller.UserPath + " (ended already, expired, another caller's, or not admitted here)"}, 0)
	}
	if h.cfg.Sessions == nil {
		unknown()
		return
	}
	var s SessionRecord
	err := h.adm.StoreCall(r.Context(), func(ctx context.Context) (err error) {
		s, err = h.cfg.Sessions.TakeSession(ctx, id, caller.UserPath)
		return err
	})
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
	used := s.Lease.Reserved
	used.Exact = true
	h.complete(r.Context(), h.cfg.Now(), &s.Lease, used, "session-"+id)
	h.log.Info("realtime session ended", "session", id, "user_path", s.UserPath, "held_ms", h.cfg.Now().Sub(s.Lease.AdmittedAt).Milliseconds())
	b, _ := json.Marshal(map[string]any{"id": id, "object": "realtime.session", "ended": true})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
