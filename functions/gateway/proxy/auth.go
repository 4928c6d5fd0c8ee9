package proxy

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// HeaderUserPath lets the master key act as any user path, and a managed
// key narrow to a path below its own.
const HeaderUserPath = "X-Tollgate-User-Path"

// HeaderTags carries a request's tags, "k=v,k2=v2", for tag rules and
// budgets; a managed key's own tags win over them.
const HeaderTags = "X-Tollgate-Tags"

// KeyInfo is what a managed key says of its caller.
type KeyInfo struct {
	ID       string
	UserPath string
	Tags     []limiter.Tag // fixed on the key
	Class    string        // fixed on the key; "" for the default
	// MaxClass caps the class the key's requests may claim: a class that
	// waits longer is taken as it ("" for no cap).
	MaxClass string
}

// Keys resolves managed API keys.
type Keys interface {
	// Lookup returns the key with this secret: ErrUnknownKey when no key
	// has it, ErrRevokedKey when its key is revoked or expired. Other
	// errors mean the lookup itself failed.
	Lookup(ctx context.Context, secret string) (KeyInfo, error)
}

// ErrUnknownKey is returned by Keys for a secret that is no key, and
// ErrRevokedKey for one of a key revoked or expired: refused even in dev
// mode, where an unknown bearer is the master.
var (
	ErrUnknownKey = errors.New("unknown API key")
	ErrRevokedKey = errors.New("revoked or expired API key")
)

// Caller is an authenticated client.
type Caller struct {
	UserPath string
	Master   bool   // the master key (or dev mode)
	KeyID    string // the managed key's id; "" for the master key
	Tags     []limiter.Tag
	// Class is the request's traffic class: the key's, else
	// X-Tollgate-Class, else the default.
	Class string
	// keyClass is set when the key fixes the class; maxClass caps the
	// class the caller may claim.
	keyClass bool
	maxClass string
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
	case key != "" && h.cfg.MasterKey != "" && subtle.ConstantTimeCompare([]byte(key), []byte(h.cfg.MasterKey)) == 1:
		c = Caller{UserPath: "/", Master: true}
	case key == "" && h.cfg.MasterKey == "":
		c = Caller{UserPath: "/", Master: true} // dev mode: no key is any key
	case key == "":
		writeError(w, proto, apiError{status: http.StatusUnauthorized, typ: errTypeAuthentication, code: errCodeInvalidAPIKey,
			message: "missing API key: send Authorization: Bearer <key>"}, 0)
		return Caller{}, false
	default:
		// A managed key is that key, in dev mode too: its user path,
		// tags and class bind it, and once revoked it is refused. Any
		// other key is refused, but in dev mode, where it is the master.
		info, err := h.lookUpKey(r.Context(), key)
		switch {
		case errors.Is(err, ErrUnknownKey) && h.cfg.MasterKey == "":
			c = Caller{UserPath: "/", Master: true}
		case errors.Is(err, ErrUnknownKey), errors.Is(err, ErrRevokedKey):
			writeError(w, proto, apiError{status: http.StatusUnauthorized, typ: errTypeAuthentication, code: errCodeInvalidAPIKey,
				message: "invalid API key"}, 0)
			return Caller{}, false
		case err != nil:
			h.log.Error("key lookup failed", "err", err)
			writeError(w, proto, apiError{status: http.StatusServiceUnavailable, typ: errTypeServer, code: errCodeServiceUnavailable,
				message: "could not check the API key; try again"}, 0)
			return Caller{}, false
		default:
			c = Caller{UserPath: info.UserPath, KeyID: info.ID, Tags: info.Tags, Class: info.Class, keyClass: info.Class != "", maxClass: info.MaxClass}
		}
	}
	if !h.tags(w, r, proto, &c) || !h.class(w, r, proto, &c) {
		return Caller{}, false
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

// lookUpKey resolves a managed key; ErrUnknownKey when there are none.
func (h *Handler) lookUpKey(ctx context.Context, key string) (KeyInfo, error) {
	if h.cfg.Keys == nil {
		return KeyInfo{}, ErrUnknownKey
	}
	var info KeyInfo
	var answer error // no such key, or revoked: the store answered
	err := h.adm.StoreCall(ctx, func(ctx context.Context) error {
		var err error
		info, err = h.cfg.Keys.Lookup(ctx, key)
		if errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrRevokedKey) {
			answer = err
			return nil
		}
		return err
	})
	if err != nil {
		return KeyInfo{}, err
	}
	return info, answer
}

// tags adds the request's X-Tollgate-Tags to the caller's, the key's own
// first; a malformed header is a 400.
func (h *Handler) tags(w http.ResponseWriter, r *http.Request, proto providers.Protocol, c *Caller) bool {
	values := r.Header.Values(HeaderTags)
	if len(values) == 0 {
		return true
	}
	given, err := limiter.ParseTags(strings.Join(values, ","))
	if err == nil {
		given, err = limiter.MergeTags(c.Tags, given)
	}
	if err != nil {
		writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, code: errCodeInvalidTags,
			message: "invalid " + HeaderTags + ": " + strings.ReplaceAll(err.Error(), "\n", "; ")}, 0)
		return false
	}
	c.Tags = given
	return true
}

// HeaderClass names a request's traffic class: interactive, standard,
// batch or background (or another the configuration defines).
const HeaderClass = "X-Tollgate-Class"

// class sets the caller's traffic class: the key's, else the header's,
// else the configured default (none unless the operator set one: a
// request that asks for no class waits for nothing); an unknown class is
// a 400.
func (h *Handler) class(w http.ResponseWriter, r *http.Request, proto providers.Protocol, c *Caller) bool {
	if c.keyClass {
		return true
	}
	c.Class = h.cfg.DefaultClass
	v := strings.ToLower(strings.TrimSpace(r.Header.Get(HeaderClass)))
	if v == "" {
		return true
	}
	if _, ok := h.cfg.Classes[v]; !ok {
		writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, code: "invalid_class",
			message: "unknown " + HeaderClass + " " + strconv.Quote(v) + ": want one of " + strings.Join(classNames(h.cfg.Classes), ", ")}, 0)
		return false
	}
	if capped, ok := h.cfg.Classes[c.maxClass]; ok && h.cfg.Classes[v] > capped {
		v = c.maxClass // the key may claim no class that waits longer
	}
	c.Class = v
	return true
}

func classNames(m map[string]time.Duration) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(m[a], m[b]) })
	return names
}
