// Package adminapi is the admin function's HTTP API: rate-limit rules with
// their live usage, counter resets, managed API keys, alerts, the audit
// trail and the review report. Every call needs the master key
// (Authorization: Bearer $TOLLGATE_MASTER_KEY), or a delegated key for
// its own subtree (see delegate.go).
package adminapi

import (
	"context"
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

	"github.com/tollgate/tollgate/functions/gateway/admission"
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
	KeyByID(ctx context.Context, id string) (configstore.Key, error)
	Keys(ctx context.Context) ([]configstore.Key, error)
	RevokeKey(ctx context.Context, id string) (configstore.Key, error)
	PutPause(ctx context.Context, p limiter.Pause) error
	DeletePause(ctx context.Context, key string) error
	PutAudit(ctx context.Context, e configstore.AuditEntry, retention time.Duration) error
	Audit(ctx context.Context, q configstore.AuditQuery) (configstore.AuditPage, error)
}

// AlertLister lists the fleet's alerts (configstore's stores).
type AlertLister interface {
	Alerts(ctx context.Context) ([]configstore.Alert, error)
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
	// Upstream, when set, shows in explain what upstreams report of their
	// limits beside the rules that limit them.
	Upstream UpstreamReader
	// Explainer runs explained requests' admission in dry run; nil
	// answers 503. Estimates, when set, shows the learned reservations
	// in explain; AdaptiveFloor is the least they reserve.
	Explainer     Explainer
	Estimates     admission.Estimates
	AdaptiveFloor int64
	// Stats, when set, serves GET /admin/stats.
	Stats metrics.StatsStore
	// Providers are listed by GET /admin/overview.
	Providers []Provider
	// Alerts, when set, serves GET /admin/alerts; AlertsConfig is what it
	// shows of the configuration.
	Alerts       AlertLister
	AlertsConfig map[string]any
	// AuditRetention is how long the audit trail keeps an entry (default
	// configstore.DefaultAuditRetention).
	AuditRetention time.Duration
	// OnRevoke, when set, is told of each revoked key's hash, so that this
	// instance's gateway forgets it at once.
	OnRevoke func(hash string)
	// DevMode accepts any key, for a local process without a master key.
	DevMode bool
	Logger  *slog.Logger
	Now     func() time.Time
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
	if cfg.AuditRetention <= 0 {
		cfg.AuditRetention = configstore.DefaultAuditRetention
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), config: map[limiter.RuleKey]limiter.Rule{}}
	for _, r := range cfg.ConfigRules {
		h.config[r.Key()] = r
	}
	// The second argument says whether a delegated key may call the
	// route (keeping to its subtree); the master may call every one.
	h.handle("POST /admin/rate-limits/reset", false, h.resetAll)
	h.crudRoutes(rules)
	h.crudRoutes(budgets)
	h.handle("POST /admin/explain", false, h.explain)
	h.handle("GET /admin/pauses", true, h.listPauses)
	h.handle("GET /admin/stats", true, h.stats)
	h.handle("GET /admin/overview", true, h.overview)
	h.handle("POST /admin/pause", true, h.pause)
	h.handle("DELETE /admin/pause", true, h.unpause)
	h.handle("POST /admin/keys", true, h.createKey)
	h.handle("GET /admin/keys", true, h.listKeys)
	h.handle("DELETE /admin/keys/{id}", true, h.revokeKey)
	h.handle("GET /admin/whoami", true, h.whoami)
	h.handle("GET /admin/alerts", true, h.listAlerts)
	h.handle("GET /admin/audit", true, h.listAudit)
	h.handle("GET /admin/report", true, h.report)
	h.mux.HandleFunc("/admin/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "unknown admin route "+r.Method+" "+r.URL.Path, nil)
	})
	return h, nil
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
