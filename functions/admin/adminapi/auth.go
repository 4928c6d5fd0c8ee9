package adminapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tollgate/tollgate/functions/admin/adminui"
	"github.com/tollgate/tollgate/functions/crosssite"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/limiter"
)

// Who may call the admin API: the master key (or anyone, in dev mode),
// and a managed key created with admin: true, which administers its own
// user path's subtree and nothing else (see delegate.go). Other managed
// keys are refused with 403.
//
// A delegated key is looked up in the store on every call (one
// consistent read), not through a cache: revoking it stops it at once on
// every instance of the admin API; the gateway, which caches keys, is
// told on the instance that revoked it (Config.OnRevoke) and the others
// drop it within their cache's bound (configstore.DefaultKeyTTL).

// principal is who makes an admin call.
type principal struct {
	master bool
	key    configstore.Key // a delegated key's
}

// Actor names the principal in the audit trail.
func (p principal) actor() string {
	if p.master {
		return "master"
	}
	return p.key.ID
}

// path is the subtree the principal administers.
func (p principal) path() string {
	if p.master {
		return "/"
	}
	return p.key.UserPath
}

type principalKey struct{}

// storeTimeout bounds the store calls of the admin API's newer routes
// (keys, alerts, audit, report, stats).
const storeTimeout = 10 * time.Second

// storeCtx is r's context with storeTimeout.
func storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), storeTimeout)
}

func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// ServeHTTP serves the dashboard's page, which holds no data, to anyone;
// everything else needs the master key or a delegated key.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if adminui.Owns(r.URL.Path) {
		adminui.ServeHTTP(w, r)
		return
	}
	secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p := principal{master: true}
	switch {
	case h.cfg.DevMode && crosssite.Is(r):
		writeError(w, http.StatusForbidden, "permission_error", crosssite.Message, nil)
		return
	case secret == "" && !h.cfg.DevMode:
		writeError(w, http.StatusUnauthorized, "authentication_error", "missing master key: send Authorization: Bearer $TOLLGATE_MASTER_KEY", nil)
		return
	case !h.cfg.DevMode && subtle.ConstantTimeCompare([]byte(secret), []byte(h.cfg.MasterKey)) == 1:
	case secret == "":
		// dev mode without a key: the master
	default:
		ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
		k, err := h.cfg.Store.KeyByHash(ctx, configstore.Hash(secret))
		cancel()
		switch {
		case err != nil && !errors.Is(err, configstore.ErrNotFound):
			h.storeFailed(w, err)
			return
		case err == nil && k.Live(h.cfg.Now()) && k.Admin:
			p = principal{key: k}
		case err == nil && k.Live(h.cfg.Now()) && !h.cfg.DevMode:
			writeError(w, http.StatusForbidden, "permission_error", "managed keys cannot use the admin API; use the master key, or a key created with admin: true for its own subtree", nil)
			return
		case !h.cfg.DevMode:
			writeError(w, http.StatusUnauthorized, "authentication_error", "invalid master key", nil)
			return
		}
		// In dev mode any other bearer is the master, as before.
	}
	h.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
}

// handle registers a route the master may call; delegated says a
// delegated key may call it too (the handler then keeps to its subtree).
func (h *Handler) handle(pattern string, delegated bool, f http.HandlerFunc) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r); !p.master && !delegated {
			h.forbidden(w, r, p, "this route is the master key's")
			return
		}
		f(w, r)
	})
}

// forbidden answers 403 for what a delegated key may not do.
func (h *Handler) forbidden(w http.ResponseWriter, r *http.Request, p principal, why string) {
	h.log.Info("refused: outside the delegated key's subtree", "key_id", p.key.ID, "user_path", p.key.UserPath,
		"route", r.Method+" "+r.URL.Path, "why", why)
	writeError(w, http.StatusForbidden, "permission_error",
		"key "+p.key.ID+" administers "+p.key.UserPath+" and what is beneath it only: "+why, map[string]any{"user_path": p.key.UserPath})
}

// whoami tells the dashboard who is signed in and what it may do.
func (h *Handler) whoami(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	out := map[string]any{"actor": p.actor(), "user_path": p.path(), "delegated": !p.master, "dev_mode": h.cfg.DevMode}
	if !p.master {
		out["key"] = keyViewOf(p.key)
	}
	writeJSON(w, http.StatusOK, out)
}

// within reports whether a user path is in the principal's subtree.
func (p principal) within(path string) bool {
	if p.master {
		return true
	}
	_, err := limiter.ParseUserPath(path)
	return err == nil && limiter.PathWithin(path, p.key.UserPath)
}

// beneath reports whether a user path is strictly below the principal's.
func (p principal) beneath(path string) bool {
	return p.within(path) && (p.master || !strings.EqualFold(path, p.key.UserPath))
}

// sees reports whether a rule is in the principal's view: a user-path
// rule or budget within its subtree (its own path's included).
func (p principal) sees(r limiter.Rule) bool {
	return p.master || r.Scope == limiter.ScopeUserPath && p.within(r.Subject)
}

// sees reports whether a rule id is in the principal's view.
func (p principal) seesID(id string) bool {
	if p.master {
		return true
	}
	r, err := limiter.ParseRuleID(id)
	return err == nil && p.sees(r)
}
