package proxy

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// HeaderUserPath lets the master key act as any user path, and a managed
// key narrow to a path below its own.
const HeaderUserPath = "X-Tollgate-User-Path"

// Keys resolves managed API keys to the user path they are bound to.
type Keys interface {
	// UserPath returns the path of the key with this secret, or
	// ErrUnknownKey when no live key has it (never issued, revoked,
	// expired). Other errors mean the lookup itself failed.
	UserPath(ctx context.Context, secret string) (string, error)
}

// ErrUnknownKey is returned by Keys for a secret that is not a live key.
var ErrUnknownKey = errors.New("unknown API key")

// Caller is an authenticated client.
type Caller struct {
	UserPath string
	Master   bool // the master key (or dev mode)
}

// secret extracts the caller's key: Authorization: Bearer, or the
// protocol's own header (x-api-key for Anthropic, x-goog-api-key or ?key=
// for Gemini).
func secret(r *http.Request, proto providers.Protocol) string {
	if auth := r.Header.Get("Authorization"); auth != "" {
		if k, ok := strings.CutPrefix(auth, "Bearer "); ok {
			return strings.TrimSpace(k)
		}
		if k, ok := strings.CutPrefix(auth, "bearer "); ok {
			return strings.TrimSpace(k)
		}
	}
	switch proto {
	case providers.ProtocolAnthropic:
		return r.Header.Get("X-Api-Key")
	case providers.ProtocolGemini:
		if k := r.Header.Get("X-Goog-Api-Key"); k != "" {
			return k
		}
		return r.URL.Query().Get("key")
	}
	return r.Header.Get("X-Api-Key")
}

// authenticate resolves the caller, writing the error answer and returning
// false when it cannot.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request, proto providers.Protocol) (Caller, bool) {
	key := secret(r, proto)
	var c Caller
	switch {
	case h.cfg.MasterKey == "":
		// Dev mode: any key, or none.
		c = Caller{UserPath: "/", Master: true}
	case key != "" && subtle.ConstantTimeCompare([]byte(key), []byte(h.cfg.MasterKey)) == 1:
		c = Caller{UserPath: "/", Master: true}
	case key == "":
		writeError(w, proto, apiError{status: http.StatusUnauthorized, typ: errTypeAuthentication, code: errCodeInvalidAPIKey,
			message: "missing API key: send Authorization: Bearer <key>"}, 0)
		return Caller{}, false
	case h.cfg.Keys == nil:
		writeError(w, proto, apiError{status: http.StatusUnauthorized, typ: errTypeAuthentication, code: errCodeInvalidAPIKey,
			message: "invalid API key"}, 0)
		return Caller{}, false
	default:
		p, err := h.cfg.Keys.UserPath(r.Context(), key)
		switch {
		case errors.Is(err, ErrUnknownKey):
			writeError(w, proto, apiError{status: http.StatusUnauthorized, typ: errTypeAuthentication, code: errCodeInvalidAPIKey,
				message: "invalid API key"}, 0)
			return Caller{}, false
		case err != nil:
			h.log.Error("key lookup failed", "err", err)
			writeError(w, proto, apiError{status: http.StatusServiceUnavailable, typ: errTypeServer, code: errCodeServiceUnavailable,
				message: "could not check the API key; try again"}, 0)
			return Caller{}, false
		}
		c = Caller{UserPath: p}
	}
	requested, ok := r.Header[http.CanonicalHeaderKey(HeaderUserPath)]
	if !ok {
		return c, true
	}
	p, err := limiter.ParseUserPath(requested[0])
	if err != nil || len(requested) > 1 {
		msg := "invalid " + HeaderUserPath + ": "
		if err != nil {
			msg += err.Error()
		} else {
			msg += "sent more than once"
		}
		writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, code: errCodeInvalidUserPath, message: msg}, 0)
		return Caller{}, false
	}
	if !c.Master && !limiter.PathWithin(p, c.UserPath) {
		writeError(w, proto, apiError{status: http.StatusForbidden, typ: errTypePermission, code: errCodeInvalidUserPath,
			message: "this key may only act for " + c.UserPath + " and paths below it, not " + p}, 0)
		return Caller{}, false
	}
	c.UserPath = p
	return c, true
}
