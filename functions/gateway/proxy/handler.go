// Package proxy is the gateway's HTTP handler: it authenticates a call,
// parses what admission needs, resolves the model to its targets, admits
// the request against the limiter for the first target with capacity,
// forwards it, and records what it used. The same http.Handler serves a
// local process, httptest and Lambda.
package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/jsonx"
	"github.com/tollgate/tollgate/providers/pricing"
	"github.com/tollgate/tollgate/providers/tokens"
)

// Config configures a Handler.
type Config struct {
	Limiter *limiter.Limiter
	Catalog *providers.Catalog
	// Estimator counts prompt tokens for the reservation; nil uses
	// tokens.Heuristic.
	Estimator tokens.Estimator
	// Prices prices each target's tokens for budgets; nil uses the
	// built-in table alone.
	Prices *pricing.Table
	// MasterKey authenticates the master caller. Empty is dev mode: any
	// key is accepted and the user path comes from X-Tollgate-User-Path.
	MasterKey string
	// Keys resolves managed keys; nil when there are none.
	Keys Keys
	// Batches records who submitted each batch, for the reconciler to
	// charge what it used once it ends; nil records nothing.
	Batches BatchRecorder
	// Refresh, when set, brings the rules and pauses up to date before
	// each admission (see configstore.Watcher).
	Refresh admission.Refresher
	// Cooldowns, when set, shares upstream cooldowns across instances;
	// CooldownCache is how long this instance trusts what it read (1 s);
	// DefaultCooldown is the cooldown of a 429 that says nothing of when to
	// come back (2 s).
	Cooldowns admission.Cooldowns
	// Upstream, when set, records what upstreams report of their limits.
	Upstream        admission.UpstreamRecorder
	CooldownCache   time.Duration
	DefaultCooldown time.Duration
	// Classes are the traffic classes and how long a request of each may
	// wait out a refusal's exact Retry-After (once, jittered, never past
	// the request's deadline) instead of being answered 429. Nil:
	// admission.DefaultClasses. DefaultClass is the class of a request that names
	// none and whose key fixes none; "" (the default) is no class, which
	// waits for nothing: seed 000's immediate, exact 429.
	Classes      map[string]time.Duration
	DefaultClass string
	// Fallbacks are the classes' policies for targets other than a
	// request's first choice (any, the default; same_family; none), and
	// Downgrades the downgrade rules: see package admission.
	Fallbacks         map[string]admission.Fallback
	Downgrades        []admission.Downgrade
	ManagedDowngrades func() []admission.Downgrade
	// Streams bound each class's streams: see package admission.
	Streams map[string]admission.StreamLimit
	// Migrations returns the migrations and their shares in force.
	Migrations func() []admission.Migration
	// ClampFloor, when positive, lets a request refused for its token
	// reservation go with its output cap lowered to what the budget leaves,
	// if that is at least ClampFloor (announced in
	// X-Tollgate-Max-Tokens-Clamped). Off by default.
	ClampFloor int64
	// Sleep waits d or until ctx ends; nil uses a timer (tests step a clock).
	Sleep func(ctx context.Context, d time.Duration) error
	// DefaultMaxTokens is the output reservation when a request sets no
	// cap of its own.
	DefaultMaxTokens int64
	// MaxOutputTokens caps any output reservation, for models whose
	// maximum the gateway does not know (default 128,000).
	MaxOutputTokens int64
	// MaxBodyBytes bounds request bodies (413 beyond).
	MaxBodyBytes int64
	// FailOpen admits requests when the limit store cannot answer; by
	// default (false) they are refused with 503 and nothing goes upstream.
	FailOpen bool
	// StoreTimeout is the deadline of each store call on a request's path
	// (DefaultStoreTimeout): past it the store is taken as failing (see
	// deadline.go).
	StoreTimeout time.Duration
	// CompletionTimeout bounds the retries of the write that records usage
	// and gives back the slot after a response (30 s, never past the
	// request's own deadline); the client's cancellation does not cut it
	// short.
	CompletionTimeout time.Duration
	// DetachCompletion lets completions that failed once be retried after
	// the answer has ended (see Handler.complete): for a local process,
	// never inside Lambda.
	DetachCompletion bool
	// StreamWriteTimeout bounds each write of an answer to the client
	// (30 s): a client that stops reading loses its connection and its
	// slot instead of holding the slot until it closes its socket.
	StreamWriteTimeout time.Duration

	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// NewID names requests; nil uses 16 random bytes in hex.
	NewID func() string
	// Rand draws weighted targets; nil uses math/rand/v2.
	Rand func() float64

	// Sessions keeps the leases of Realtime sessions between the minting
	// of their credentials and their end; without it a session's lease
	// lasts until RealtimeMaxSession. RealtimeMaxSession is how long a
	// session may hold its slot (30 min); RealtimeSessionTokens the tokens
	// a session reserves (0: none).
	Sessions              Sessions
	RealtimeMaxSession    time.Duration
	RealtimeSessionTokens int64

	// Estimates, when set, gives what requests of a route, model and key
	// really used: a request that sets no output cap reserves the learned
	// p95 (at least AdaptiveFloor) instead of DefaultMaxTokens, and with
	// AdaptiveCapped one that sets a cap reserves it too, never above its
	// cap. The settlement corrects the rest either way.
	Estimates      admission.Estimates
	AdaptiveFloor  int64
	AdaptiveCapped bool

	// Metrics receives what the gateway decides (nil: nothing).
	Metrics metrics.Sink
	// Observer receives the dashboard's and the report's counts of each
	// decision and completion (nil: nothing). It is called on the
	// request's path, so it must not block: metrics.Stats adds to maps in
	// memory and writes in the background.
	Observer admission.Observer

	// Pauses, when set, returns the pauses in force (the admin API's, kept
	// fresh by Refresh): requests they match are refused with 503 and the
	// pause's reason, a paused provider or model routed around.
	Pauses func() []limiter.Pause
}

// Sessions records the leases of Realtime sessions.
type Sessions interface {
	PutSession(ctx context.Context, s SessionRecord) error
	// TakeSession removes and returns a session held by a caller at or
	// below the user path within, once, in one conditional write;
	// ErrUnknownSession when there is none, or it is another caller's
	// (which is left as it was).
	TakeSession(ctx context.Context, id, within string) (SessionRecord, error)
}

// SessionRecord is the lease a Realtime session holds.
type SessionRecord struct {
	Provider, ID, UserPath string
	Lease                  limiter.Lease
}

// ErrUnknownSession is TakeSession's answer for a session it does not hold.
var ErrUnknownSession = errors.New("unknown realtime session")

// BatchRecorder records submitted batches.
type BatchRecorder interface {
	RecordBatch(ctx context.Context, b BatchRecord) error
}

// BatchRecord is who submitted a batch, and where.
type BatchRecord struct {
	Provider, ID string
	UserPath     string
	KeyID        string
	Tags         []limiter.Tag
	SubmittedAt  time.Time
}

// Handler is the gateway's http.Handler.
type Handler struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	adm     *admission.Orchestrator // decides what each request gets
	pending sync.WaitGroup          // completions retried after their answer
	lat     latencies               // upstream answer times, for ramps
}

// Admission returns the orchestrator that decides the handler's
// admissions, for /admin/explain in the same process.
func (h *Handler) Admission() *admission.Orchestrator { return h.adm }

// FailOpenAdmits returns how many requests were admitted without a limit
// check because the store was unavailable (failure mode open).
func (h *Handler) FailOpenAdmits() int64 { return h.adm.FailOpenAdmits() }

// ShadowRefusals returns how many refusals shadow rules would have made.
func (h *Handler) ShadowRefusals() int64 { return h.adm.ShadowRefusals() }

// StoreStalled reports whether a store call on the request path timed out
// within the last second and none has answered since.
func (h *Handler) StoreStalled() bool { return h.adm.StoreStalled() }

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Limiter == nil || cfg.Catalog == nil {
		return nil, errors.New("proxy: Limiter and Catalog are required")
	}
	if cfg.Estimator == nil {
		cfg.Estimator = tokens.Heuristic{}
	}
	if cfg.Classes == nil {
		cfg.Classes = admission.DefaultClasses()
	}
	if _, ok := cfg.Classes[cfg.DefaultClass]; !ok && cfg.DefaultClass != "" {
		return nil, errors.New("proxy: DefaultClass names no class")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.Discard{}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.CompletionTimeout <= 0 {
		cfg.CompletionTimeout = 30 * time.Second
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = 30 * time.Second
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = admission.DefaultStoreTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = randomID
	}
	adm, err := admission.New(AdmissionConfig(cfg))
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), adm: adm}
	h.routes()
	return h, nil
}

// AdmissionConfig is the configuration of the orchestrator that decides
// the admissions of a handler configured by cfg: the gateway's, and the
// admin API's explain in a process of its own.
func AdmissionConfig(cfg Config) admission.Config {
	return admission.Config{
		Limiter: cfg.Limiter, Catalog: cfg.Catalog, Prices: cfg.Prices,
		Refresh: cfg.Refresh, Pauses: cfg.Pauses,
		Cooldowns: cfg.Cooldowns, Upstream: cfg.Upstream, CooldownCache: cfg.CooldownCache, DefaultCooldown: cfg.DefaultCooldown,
		Classes: cfg.Classes, Fallbacks: cfg.Fallbacks, Downgrades: cfg.Downgrades, ManagedDowngrades: cfg.ManagedDowngrades, Streams: cfg.Streams, ClampFloor: cfg.ClampFloor,
		Migrations:       cfg.Migrations,
		DefaultMaxTokens: cfg.DefaultMaxTokens, MaxOutputTokens: cfg.MaxOutputTokens,
		Estimates: cfg.Estimates, AdaptiveFloor: cfg.AdaptiveFloor, AdaptiveCapped: cfg.AdaptiveCapped,
		RealtimeMaxSession: cfg.RealtimeMaxSession, RealtimeSessionTokens: cfg.RealtimeSessionTokens,
		FailOpen: cfg.FailOpen, StoreTimeout: cfg.StoreTimeout,
		Observer: cfg.Observer, Metrics: cfg.Metrics, Logger: cfg.Logger,
		Now: cfg.Now, Rand: cfg.Rand, Sleep: cfg.Sleep,
	}
}

func randomID() string {
	var b [16]byte
	var id [32]byte
	_, _ = rand.Read(b[:])
	hex.Encode(id[:], b[:])
	return string(id[:])
}

// ServeHTTP implements http.Handler. In dev mode a request a browser sent
// from another origin's page is refused (see package crosssite).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.cfg.MasterKey == "" && refuseCrossSite(w, r) {
		return
	}
	// The busiest routes are found before the mux, which would pick the
	// same handler for exactly this method and unescaped path, at the
	// cost of a microsecond a request.
	if r.Method == http.MethodPost && r.URL.RawPath == "" {
		switch r.URL.Path {
		case "/v1/chat/completions":
			h.chat(w, r)
			return
		case "/v1/messages":
			h.messages(w, r)
			return
		case "/v1/responses":
			h.responses(w, r)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) routes() {
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	h.mux.HandleFunc("POST /v1/chat/completions", h.chat)
	h.mux.HandleFunc("POST /v1/responses", h.responses)
	h.mux.HandleFunc("POST /v1/embeddings", h.embeddings)
	h.mux.HandleFunc("POST /v1/messages", h.messages)
	h.mux.HandleFunc("POST /v1/messages/count_tokens", h.countTokens)
	h.mux.HandleFunc("POST /v1/audio/speech", h.audio)
	h.mux.HandleFunc("POST /v1/audio/transcriptions", h.audio)
	h.mux.HandleFunc("POST /v1/audio/translations", h.audio)
	h.mux.HandleFunc("POST /v1/batches", h.batches)
	h.mux.HandleFunc("POST /v1/realtime/client_secrets", h.realtime)
	h.mux.HandleFunc("POST /v1/realtime/sessions", h.realtime)
	h.mux.HandleFunc("POST /v1/realtime/sessions/{id}/end", h.endSession)
	h.mux.HandleFunc("GET /v1/models", h.models)
	h.mux.HandleFunc("GET /v1/usage", h.usage)
	h.mux.HandleFunc("/p/{provider}/{path...}", h.passthrough)
	h.mux.HandleFunc("POST /v1beta/models/{target}", h.generate)
	h.mux.HandleFunc("POST /v1/models/{target}", h.generate) // Gemini's v1 API, which the Google clients may use
	h.mux.HandleFunc("/", h.unknownRoute)
}

// unknownRoute answers 404 in the protocol the path implies: Anthropic's
// under /v1/messages, Gemini's under /v1beta/ (or a model:action path),
// OpenAI's otherwise.
func (h *Handler) unknownRoute(w http.ResponseWriter, r *http.Request) {
	h.log.Info("unknown route", "method", r.Method, "path", r.URL.Path)
	proto := protocolOf(r.URL.Path)
	typ := errTypeNotFound
	if proto == providers.ProtocolOpenAI {
		typ = errTypeInvalidRequest // what OpenAI answers for a URL it does not know
	}
	writeError(w, proto, apiError{status: http.StatusNotFound, typ: typ, code: "unknown_url",
		message: "unknown route " + r.Method + " " + r.URL.Path}, 0)
}

// readJSON reads a JSON request body within the size limit, writing the
// error answer and returning false when it cannot: a type that is not
// application/json, or none (what a page of another site sends with
// no-cors), is 415; a member given twice in one object is 400 (see
// refuseDuplicates). valid says whether the body is JSON at all (checked
// in the same pass as the duplicates): a route that is given one that is
// not decodes it, for the decoder's own word on what is wrong.
func (h *Handler) readJSON(w http.ResponseWriter, r *http.Request, proto providers.Protocol) (body []byte, valid, ok bool) {
	if ct := providers.HeaderValue(r.Header, "Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			msg := "unsupported Content-Type " + ct + ": send application/json"
			if ct == "" {
				msg = "no Content-Type: send application/json"
			}
			writeError(w, proto, apiError{status: http.StatusUnsupportedMediaType, typ: errTypeInvalidRequest, code: errCodeUnsupportedMediaType,
				message: msg}, 0)
			return nil, false, false
		}
	}
	body, ok = h.readBody(w, r, proto)
	if !ok {
		return nil, false, false
	}
	c := jsonx.Check(body)
	if !c.Valid {
		return body, false, !refuseDuplicates(w, proto, body)
	}
	if c.Duplicate {
		refuseDuplicate(w, proto, c.Name, c.Path)
		return nil, false, false
	}
	return body, true, true
}

// refuseDuplicates answers 400 for a JSON body with a member given twice
// in one object: the gateway reads the last ("max_tokens":5000,
// "max_tokens":1 reserves 1), an upstream may read the first and produce
// 5,000. It reports whether it answered.
func refuseDuplicates(w http.ResponseWriter, proto providers.Protocol, body []byte) bool {
	name, path, dup := jsonx.Duplicate(body)
	if dup {
		refuseDuplicate(w, proto, name, path)
	}
	return dup
}

func refuseDuplicate(w http.ResponseWriter, proto providers.Protocol, name, path string) {
	badRequest(w, proto, path, "the member "+strconv.Quote(name)+" is given twice (at "+path+"): parsers read duplicates differently; send each member once")
}

// refuseFolded answers 400 for a member of the JSON object obj that is
// one admission reads spelled otherwise but for case ("MAX_TOKENS"):
// encoding/json would read it as the member, an upstream that matches
// names exactly would not, and the reservation would not be what the
// upstream does. It reports whether it answered.
func refuseFolded(w http.ResponseWriter, proto providers.Protocol, obj []byte, at string, names ...string) bool {
	got, want, found := jsonx.Folded(obj, names...)
	if !found {
		return false
	}
	badRequest(w, proto, at+want, "the member "+strconv.Quote(at+got)+" is not "+strconv.Quote(at+want)+": member names are case-sensitive")
	return true
}

// readBody reads a request body within the size limit, writing the error
// answer and returning false when it cannot.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, proto providers.Protocol) ([]byte, bool) {
	body, err := readAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes), min(r.ContentLength, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, proto, apiError{status: http.StatusRequestEntityTooLarge, typ: errTypeInvalidRequest, code: errCodeRequestTooLarge,
				message: "request body is larger than the gateway's limit of " + itoa(h.cfg.MaxBodyBytes) + " bytes"}, 0)
			return nil, false
		}
		writeError(w, proto, apiError{status: http.StatusBadRequest, typ: errTypeInvalidRequest, message: "could not read the request body: " + err.Error()}, 0)
		return nil, false
	}
	return body, true
}

// readAll is io.ReadAll into a buffer of the size a body declares (one
// byte more, to read its end without growing), when it declares one, up
// to maxPrealloc: a client that declares megabytes and sends nothing
// holds no more than that.
func readAll(r io.Reader, declared int64) ([]byte, error) {
	if declared <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, min(declared+1, maxPrealloc))
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// maxPrealloc bounds what readAll sets aside for a body before it
// arrives; a longer one grows as it comes.
const maxPrealloc = 64 << 10
