package adminapi

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/limiter"
)

// keyView is a managed key as listed: never its secret or hash.
type keyView struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	Name      string     `json:"name"`
	UserPath  string     `json:"user_path"`
	Tags      string     `json:"tags,omitempty"`
	Class     string     `json:"class,omitempty"`
	MaxClass  string     `json:"max_class,omitempty"`
	Admin     bool       `json:"admin,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	Revoked   bool       `json:"revoked"`
}

func keyViewOf(k configstore.Key) keyView {
	v := keyView{ID: k.ID, Prefix: k.Prefix, Name: k.Name, UserPath: k.UserPath, Tags: limiter.FormatTags(k.Tags), Class: k.Class, MaxClass: k.MaxClass,
		Admin: k.Admin, CreatedAt: k.CreatedAt, Revoked: k.Revoked}
	if !k.ExpiresAt.IsZero() {
		e := k.ExpiresAt
		v.ExpiresAt = &e
	}
	return v
}

// keyInput is the body of POST /admin/keys.
type keyInput struct {
	UserPath  string     `json:"user_path"`
	Name      string     `json:"name"`
	ExpiresAt *time.Time `json:"expires_at"`
	ExpiresIn string     `json:"expires_in"`
	// Tags are fixed on the key: "k=v,k2=v2" or an object.
	Tags any `json:"tags"`
	// Class fixes the traffic class of the key's requests; MaxClass
	// caps the class they may claim.
	Class    string `json:"class"`
	MaxClass string `json:"max_class"`
	// Admin makes the key a delegated administrator of its user
	// path's subtree.
	Admin bool `json:"admin"`
}

// expiry is when the key expires (zero: never), from expires_at or
// expires_in, and what is wrong with them.
func (in *keyInput) expiry(now time.Time) (time.Time, []fieldError) {
	var errs []fieldError
	var expires time.Time
	switch {
	case in.ExpiresAt != nil && in.ExpiresIn != "":
		errs = append(errs, fieldError{Field: "expires_at", Message: "give expires_at or expires_in, not both"})
	case in.ExpiresAt != nil:
		expires = *in.ExpiresAt
		if !expires.After(now) {
			errs = append(errs, fieldError{Field: "expires_at", Message: "must be in the future"})
		}
	case in.ExpiresIn != "":
		d, err := time.ParseDuration(in.ExpiresIn)
		if err != nil || d <= 0 {
			errs = append(errs, fieldError{Field: "expires_in", Message: "a positive Go duration, e.g. 720h"})
		}
		expires = now.Add(d)
	}
	return expires, errs
}

// createKey makes a key and answers its secret, the one time it is shown;
// a delegated administrator makes keys in its subtree only, ending when
// its own does at the latest.
func (h *Handler) createKey(w http.ResponseWriter, r *http.Request) {
	var in keyInput
	var errs []fieldError
	if _, ok := decode(w, r, &in, &errs); !ok {
		return
	}
	now := h.cfg.Now()
	if _, err := limiter.ParseUserPath(in.UserPath); err != nil {
		errs = append(errs, fieldError{Field: "user_path", Message: err.Error()})
	}
	tags, err := tagsOf(in.Tags)
	if err != nil {
		errs = append(errs, fieldError{Field: "tags", Message: strings.ReplaceAll(err.Error(), "\n", "; ")})
	}
	for _, c := range []struct{ field, class string }{{"class", in.Class}, {"max_class", in.MaxClass}} {
		if c.class != "" && h.cfg.Classes != nil && !slices.Contains(h.cfg.Classes, c.class) {
			errs = append(errs, fieldError{Field: c.field, Message: "not a traffic class: want one of " + strings.Join(h.cfg.Classes, ", ")})
		}
	}
	if len(in.Name) > 200 {
		errs = append(errs, fieldError{Field: "name", Message: "at most 200 characters"})
	}
	expires, more := in.expiry(now)
	errs = append(errs, more...)
	if len(errs) > 0 {
		invalid(w, errs)
		return
	}
	if p := principalOf(r); !p.master {
		if why := mayKey(p, in.UserPath, in.Admin); why != "" {
			h.forbidden(w, r, p, why)
			return
		}
		if !p.key.ExpiresAt.IsZero() && (expires.IsZero() || expires.After(p.key.ExpiresAt)) {
			// A key it makes ends when it does, at the latest.
			expires = p.key.ExpiresAt
		}
	}
	secret := configstore.NewSecret()
	hash := configstore.Hash(secret)
	k := configstore.Key{
		ID: configstore.KeyID(hash), Hash: hash, Prefix: secret[:9], Name: in.Name,
		UserPath: in.UserPath, Tags: tags, Class: in.Class, MaxClass: in.MaxClass, Admin: in.Admin, CreatedAt: now.UTC(), ExpiresAt: expires.UTC(),
	}
	if expires.IsZero() {
		k.ExpiresAt = time.Time{}
	}
	if err := h.cfg.Store.PutKey(r.Context(), k); err != nil {
		h.storeFailed(w, err)
		return
	}
	h.log.Info("key created", "key_id", k.ID, "user_path", k.UserPath, "name", k.Name, "admin", k.Admin, "actor", principalOf(r).actor())
	v := keyViewOf(k)
	h.record(r, k.ID, k.UserPath, nil, v)
	// The one response that carries the secret.
	writeJSON(w, http.StatusCreated, struct {
		keyView
		Key string `json:"key"`
	}{v, secret})
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := h.cfg.Store.Keys(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	p := principalOf(r)
	out := make([]keyView, 0, len(keys))
	for _, k := range keys {
		if p.within(k.UserPath) {
			out = append(out, keyViewOf(k))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := storeCtx(r)
	defer cancel()
	cur, err := h.cfg.Store.KeyByID(ctx, id)
	switch {
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "no key with id "+id, nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	if p := principalOf(r); !p.master {
		why := mayKey(p, cur.UserPath, cur.Admin)
		if why == "" && cur.ID == p.key.ID {
			why = "a key does not revoke itself"
		}
		if why != "" {
			h.forbidden(w, r, p, why)
			return
		}
	}
	k, err := h.cfg.Store.RevokeKey(ctx, id)
	switch {
	case errors.Is(err, configstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "no key with id "+r.PathValue("id"), nil)
		return
	case err != nil:
		h.storeFailed(w, err)
		return
	}
	h.log.Info("key revoked", "key_id", k.ID, "user_path", k.UserPath, "actor", principalOf(r).actor())
	if h.cfg.OnRevoke != nil {
		h.cfg.OnRevoke(k.Hash)
	}
	h.record(r, k.ID, k.UserPath, keyViewOf(cur), keyViewOf(k))
	writeJSON(w, http.StatusOK, keyViewOf(k))
}
