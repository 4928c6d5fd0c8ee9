// Package adminapi is the admin function's HTTP API: rate-limit rules with
// their live usage, counter resets, and managed API keys. Every call needs
// the master key (Authorization: Bearer $TOLLGATE_MASTER_KEY).
package adminapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/functions/admin/adminui"
	"github.com/tollgate/tollgate/functions/crosssite"
	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers/pricing"
)

// Store is what the admin API reads and changes.
type Store interface {
	Snapshot(ctx context.Context) (configstore.Snapshot, error)
	PutRule(ctx context.Context, r configstore.Rule, from limiter.RuleKey, version int64) (configstore.Rule, error)
	DeleteRule(ctx context.Context, key limiter.RuleKey, version int64) error
	Regenerate(ctx context.Context, keys []limiter.RuleKey) error
	PutKey(ctx context.Context, k configstore.Key) error
	KeyByHash(ctx context.Context, hash string) (configstore.Key, error)
	Keys(ctx context.Context) ([]configstore.Key, error)
	RevokeKey(ctx context.Context, id string) (configstore.Key, error)
	PutPause(ctx context.Context, p limiter.Pause) error
	DeletePause(ctx context.Context, key string) error
}

// Config configures a Handler.
type Config struct {
	Store Store
	// ConfigRules are the rules of the file and the environment: listed,
	// never changed through the API.
	ConfigRules []limiter.Rule
	// Limiter reads live usage; Watcher keeps its rules in step with the
	// store, and is reloaded after each change.
	Limiter   *limiter.Limiter
	Watcher   *configstore.Watcher
	MasterKey string
	// Prices price explained requests (nil: the built-in table).
	Prices *pricing.Table
	// Classes are the traffic classes a key may be given (nil: any).
	Classes []string
	// Estimates, when set, shows the learned reservations in explain;
	// AdaptiveFloor is the least they reserve.
	Estimates     proxy.Estimates
	AdaptiveFloor int64
	// Stats, when set, serves GET /admin/stats.
	Stats metrics.StatsStore
	// Providers are listed by GET /admin/overview.
	Providers []Provider
	// Burndown is the output burndown of a provider's model, for explained
	// requests on rules of Bedrock's quota (nil: 1).
	Burndown func(provider, model string) int64
	// DevMode accepts any key, for a local process without a master key.
	DevMode bool
	// KeyRevoked, when set, is told of each key revoked, so that this
	// process's gateway refuses it at once (others within their key
	// cache's bound).
	KeyRevoked func(configstore.Key)
	Logger     *slog.Logger
	Now        func() time.Time
}

// Handler serves the admin API.
type Handler struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	config map[limiter.RuleKey]limiter.Rule
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil || cfg.Limiter == nil || cfg.Watcher == nil {
		return nil, errors.New("adminapi: Store, Limiter and Watcher are required")
	}
	if cfg.MasterKey == "" && !cfg.DevMode {
		return nil, errors.New("adminapi: a master key is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), config: map[limiter.RuleKey]limiter.Rule{}}
	for _, r := range cfg.ConfigRules {
		h.config[r.Key()] = r
	}
	h.mux.HandleFunc("POST /admin/rate-limits/reset", h.resetAll)
	h.crudRoutes(rules)
	h.crudRoutes(budgets)
	h.mux.HandleFunc("POST /admin/explain", h.explain)
	h.mux.HandleFunc("GET /admin/pauses", h.listPauses)
	h.mux.HandleFunc("GET /admin/stats", h.stats)
	h.mux.HandleFunc("GET /admin/overview", h.overview)
	h.mux.HandleFunc("POST /admin/pause", h.pause)
	h.mux.HandleFunc("DELETE /admin/pause", h.unpause)
	h.mux.HandleFunc("POST /admin/keys", h.createKey)
	h.mux.HandleFunc("GET /admin/keys", h.listKeys)
	h.mux.HandleFunc("DELETE /admin/keys/{id}", h.revokeKey)
	h.mux.HandleFunc("/admin/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "unknown admin route "+r.Method+" "+r.URL.Path, nil)
	})
	return h, nil
}

// ServeHTTP serves the dashboard's page, which holds no data, to anyone;
// everything else needs the master key.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if adminui.Owns(r.URL.Path) {
		adminui.ServeHTTP(w, r)
		return
	}
	secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case h.cfg.DevMode && crosssite.Is(r):
		writeError(w, http.StatusForbidden, "permission_error", crosssite.Message, nil)
		return
	case h.cfg.DevMode:
	case secret == "":
		writeError(w, http.StatusUnauthorized, "authentication_error", "missing master key: send Authorization: Bearer $TOLLGATE_MASTER_KEY", nil)
		return
	case subtle.ConstantTimeCompare([]byte(secret), []byte(h.cfg.MasterKey)) == 1:
	default:
		if k, err := h.cfg.Store.KeyByHash(r.Context(), configstore.Hash(secret)); err == nil && k.Live(h.cfg.Now()) {
			writeError(w, http.StatusForbidden, "permission_error", "managed keys cannot use the admin API; use the master key", nil)
			return
		}
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid master key", nil)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// fieldError is one bad field of a request.
type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, typ, msg string, extra map[string]any) {
	e := map[string]any{"type": typ, "message": msg}
	for k, v := range extra {
		e[k] = v
	}
	writeJSON(w, status, map[string]any{"error": e})
}

func invalid(w http.ResponseWriter, fields []fieldError) {
	msgs := make([]string, len(fields))
	for i, f := range fields {
		msgs[i] = f.Field + ": " + f.Message
	}
	writeError(w, http.StatusBadRequest, "invalid_request_error", strings.Join(msgs, "; "), map[string]any{"fields": fields})
}

// maxBody bounds an admin request body.
const maxBody = 1 << 20

// decode reads a JSON body into v: 415 for a body that says it is not
// JSON or says nothing (what a page of another site sends with no-cors),
// 413 for one over maxBody, 400 for one that is not a JSON object.
// Unknown fields and values of the wrong type are appended to errs, not
// answered, so that a request's every problem is reported at once. It
// returns the body.
func decode(w http.ResponseWriter, r *http.Request, v any, errs *[]fieldError) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct == "" {
		writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "no Content-Type: send application/json", nil)
		return nil, false
	} else if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported Content-Type "+ct+": send application/json", nil)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request body is larger than "+strconv.Itoa(maxBody)+" bytes", nil)
			return nil, false
		}
		invalid(w, []fieldError{{Field: "body", Message: "could not read it: " + err.Error()}})
		return nil, false
	}
	if !isObject(body) {
		invalid(w, []fieldError{{Field: "body", Message: "must be a JSON object"}})
		return nil, false
	}
	*errs = append(*errs, unknownFields(body, reflect.TypeOf(v), "")...)
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			*errs = append(*errs, fieldError{Field: te.Field, Message: "must be a JSON " + jsonKind(te.Type) + ", not " + te.Value})
		} else {
			invalid(w, []fieldError{{Field: "body", Message: err.Error()}})
			return nil, false
		}
	}
	return body, true
}

func isObject(b []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}

func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "number"
}

// unknownFields lists the members of the JSON object body that the struct
// t (or what it points to) has no field for, at every depth, as
// encoding/json matches them (case ignored, embedded structs flattened).
func unknownFields(body []byte, t reflect.Type, prefix string) []fieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	known := map[string]reflect.Type{}
	jsonFields(t, known)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	var errs []fieldError
	for _, k := range names {
		ft, ok := known[strings.ToLower(k)]
		if !ok {
			errs = append(errs, fieldError{Field: prefix + k, Message: "unknown field"})
			continue
		}
		errs = append(errs, unknownFields(m[k], ft, prefix+k+".")...)
	}
	return errs
}

func jsonFields(t reflect.Type, into map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
		case f.Anonymous && name == "":
			jsonFields(f.Type, into)
		case name == "":
			into[strings.ToLower(f.Name)] = f.Type
		default:
			into[strings.ToLower(name)] = f.Type
		}
	}
}

var errBadTags = errors.New(`tags are "k=v,k2=v2" or an object of strings`)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func (h *Handler) storeFailed(w http.ResponseWriter, err error) {
	h.log.Error("admin store failed", "err", err)
	writeError(w, http.StatusServiceUnavailable, "api_error", "the admin store cannot answer right now; try again", nil)
}
