// Package app is the composition root shared by tollgate's functions: from
// the configuration it builds the limit store, the limiter, the providers
// and the handlers, once, outside any request. Each functions/<fn>/main.go
// calls it and starts what it needs.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/tollgate/tollgate/functions/admin/adminapi"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/functions/gateway/admission"
	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/infra/metrics"
	"github.com/tollgate/tollgate/infra/secrets"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/tokens"
)

// App is everything built from the configuration.
type App struct {
	Config  *config.Config
	Log     *slog.Logger
	Store   limiter.Store
	Limiter *limiter.Limiter
	Catalog *providers.Catalog
	// Dynamo is the DynamoDB client when the store is dynamodb.
	Dynamo *dynamodb.Client

	streams       *dynamodbstreams.Client
	feed          reconcile.Source
	secretOptions secrets.Options
	resolver      *secrets.Resolver // made by keys, once
	// Gateway is the gateway's handler (nil until BuildGateway).
	Gateway *proxy.Handler
	// Admin is the admin API's handler (nil until BuildAdmin).
	Admin *adminapi.Handler
	// Config store: manual rules, generations, managed keys; and the
	// watcher that keeps the limiter's rules in step with it.
	ConfigStore interface {
		adminapi.Store
		configstore.Source
	}
	Watcher *configstore.Watcher
	// Clock is the time of every decision the handlers make; tests set it.
	Clock func() time.Time
	// Sleep is how the gateway waits out a refusal (nil: a timer); tests
	// step Clock instead.
	Sleep func(ctx context.Context, d time.Duration) error

	closers []func()
	// keyCache resolves managed keys for the gateway; the admin API drops
	// what it holds of a key it revokes.
	keyCache *configstore.KeyCache
	// batchCursor is where the next look at pending batches starts.
	batchMu     sync.Mutex
	batchCursor string
	// est reads learned estimates for the gateway and the admin API.
	est *estimates
	// Metrics receives what the functions decide: EMF lines inside
	// Lambda, Prometheus counters (prom, served on /metrics) locally.
	Metrics metrics.Sink
	prom    *metrics.Prometheus
	stats   *metrics.Stats // the dashboard's counts, kept in the store

	// runCtx lives as long as the process: the alert deliveries' workers
	// run in it.
	runCtx      context.Context
	alertsMu    sync.Mutex
	alerts      *alerting // built on first use
	alertsBuilt bool
}

// Logger returns the JSON logger every function logs with, at the level
// of TOLLGATE_LOG_LEVEL (debug, info, warn, error; default info).
func Logger(w io.Writer, env config.Env) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(env["TOLLGATE_LOG_LEVEL"])); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// New reads the configuration and builds the store and limiter.
func New(ctx context.Context, env config.Env, log *slog.Logger) (*App, error) {
	cfg, err := config.Load(env)
	if err != nil {
		return nil, fmt.Errorf("configuration:\n%w", err)
	}
	a := &App{Config: cfg, Log: log, Clock: time.Now, runCtx: context.WithoutCancel(ctx)}
	if cfg.Settings.MasterKey == "" && cfg.Settings.MasterKeyParameter != "" {
		r, err := a.keys(ctx)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_MASTER_KEY_PARAMETER: %w", err)
		}
		key, err := r.Parameter(ctx, cfg.Settings.MasterKeyParameter)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_MASTER_KEY_PARAMETER: %w", err)
		}
		cfg.Settings.MasterKey = key
	}
	switch cfg.Settings.Store {
	case "memory":
		if cfg.Settings.InLambda {
			return nil, errors.New("TOLLGATE_STORE=memory inside Lambda: limits would not hold across instances; use dynamodb")
		}
		a.Store = memstore.New()
	case "dynamodb":
		if err := a.openDynamo(ctx); err != nil {
			return nil, err
		}
	}
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	if fn := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); fn != "" {
		a.Metrics = &metrics.EMF{W: os.Stdout, Function: fn}
	} else {
		a.prom = metrics.NewPrometheus()
		a.Metrics = a.prom
	}
	if ss, ok := a.Store.(metrics.StatsStore); ok {
		a.stats = &metrics.Stats{Store: ss, Now: func() time.Time { return a.Clock() }}
		a.Metrics = metrics.Multi{a.Metrics, a.stats}
	}
	rules := cfg.Rules
	if !cfg.RateLimitsEnabled {
		log.Warn("rate_limits.enabled is false: rules are loaded but not enforced")
		rules = nil
	}
	rs, err := limiter.NewRules(rules)
	if err != nil {
		return nil, err
	}
	// A budget full of reservations has room again once the reconciler
	// settled them: one of its intervals after they complete, and a margin.
	a.Limiter, err = limiter.New(limiter.Config{Store: a.Store, Rules: rs, LeaseTTL: cfg.Gateway.LeaseTTL,
		SettleWait: cfg.Settings.ReconcileInterval + time.Second})
	if err != nil {
		return nil, err
	}
	if cfg.Settings.Store == "dynamodb" {
		a.ConfigStore = configstore.NewDynamo(a.Dynamo, dynamostore.Names(cfg.Settings.TablePrefix).Config)
	} else {
		a.ConfigStore = configstore.NewMemory()
	}
	a.Watcher = configstore.NewWatcher(a.ConfigStore, rules, a.Limiter, 0, log)
	a.Watcher.AlignBudgets(cfg.BudgetLocation)
	if c, ok := a.Store.(admission.Cooldowns); ok {
		a.Watcher.WatchRamps(rampHealth(c, cfg, log, a.latencyDoubled))
	}
	a.watchMigrations()
	if r, ok := a.Store.(configstore.UpstreamReader); ok && len(cfg.AdaptRules) > 0 {
		a.Watcher.Adapt(cfg.AdaptRules, r)
	}
	if cfg.RateLimitsEnabled {
		if err := a.Watcher.Load(ctx); err != nil {
			log.Warn("could not load the admin API's rules; enforcing the configured ones until it can", "err", err)
		}
	}
	log.Info("configuration loaded", "file", cfg.File, "rules", a.Limiter.Rules().Len(), "store", cfg.Settings.Store)
	return a, nil
}

// openDynamo connects the DynamoDB store, creating missing tables first
// when asked to (local processes only).
func (a *App) openDynamo(ctx context.Context) error {
	s := a.Config.Settings
	client, err := dynamostore.NewClient(ctx, dynamostore.ClientOptions{})
	if err != nil {
		return fmt.Errorf("DynamoDB client: %w", err)
	}
	a.Dynamo = client
	if s.CreateTables {
		if s.InLambda {
			a.Log.Warn("TOLLGATE_CREATE_TABLES is ignored inside Lambda: the tables come from template.yaml")
		} else {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if err := dynamostore.CreateTables(cctx, client, s.TablePrefix); err != nil {
				return fmt.Errorf("TOLLGATE_CREATE_TABLES: %w", err)
			}
			a.Log.Info("tables ready", "prefix", s.TablePrefix)
		}
	}
	st := a.Config.Store
	a.Store, err = dynamostore.New(dynamostore.Options{
		API:              client,
		TablePrefix:      s.TablePrefix,
		RejectCacheTTL:   st.RejectCache,
		TokenPrevRefresh: st.TokenPrevRefresh,
		Logger:           a.Log,
	})
	return err
}

// BuildGateway builds the providers and the gateway handler.
func (a *App) BuildGateway() error {
	s := a.Config.Settings
	if s.MasterKey == "" {
		if s.InLambda {
			return errors.New("TOLLGATE_MASTER_KEY is required inside Lambda")
		}
		a.Log.Warn("dev mode: TOLLGATE_MASTER_KEY is not set, so any API key is accepted and " +
			"X-Tollgate-User-Path (default /) chooses the user path; set a master key before exposing this port")
	}
	catalog, err := a.buildCatalog(context.Background())
	if err != nil {
		return err
	}
	a.Catalog = catalog
	names := make([]string, 0, len(catalog.Providers()))
	for _, p := range catalog.Providers() {
		names = append(names, p.Name())
	}
	a.Log.Info("providers ready", "providers", strings.Join(names, ","), "models", strings.Join(catalog.ModelIDs(), ","))
	pc := a.gatewayConfig(catalog)
	if a.Config.RateLimitsEnabled {
		// The gateway agrees shard layouts with the other instances.
		a.Watcher.RecordLayouts()
		if err := a.Watcher.Load(context.Background()); err != nil {
			a.Log.Warn("could not load the admin API's rules; enforcing the configured ones until it can", "err", err)
		}
	}
	// Managed keys bind their callers in dev mode too.
	a.keyCache = configstore.NewKeyCache(a.ConfigStore, 0)
	pc.Keys = keyResolver{cache: a.keyCache, now: a.Clock}
	if bs, ok := a.ConfigStore.(batchStore); ok {
		pc.Batches = batchRecorder{store: bs}
	}
	if ss, ok := a.ConfigStore.(sessionStore); ok {
		pc.Sessions = sessions{store: ss}
	}
	a.Gateway, err = proxy.New(pc)
	return err
}

// gatewayConfig is the gateway's configuration over catalog, as far as
// admission needs it (and the admin API's explain, which runs the same
// admission).
func (a *App) gatewayConfig(catalog *providers.Catalog) proxy.Config {
	s := a.Config.Settings
	pc := proxy.Config{
		Limiter:            a.Limiter,
		Catalog:            catalog,
		Estimator:          tokens.BPE{},
		Prices:             a.Config.PriceTable(),
		MasterKey:          s.MasterKey,
		DefaultMaxTokens:   a.Config.Gateway.DefaultMaxTokens,
		MaxOutputTokens:    a.Config.Gateway.MaxOutputTokens,
		StreamWriteTimeout: a.Config.Gateway.StreamWriteTimeout,
		CompletionTimeout:  a.Config.Gateway.CompletionTimeout,
		DetachCompletion:   !s.InLambda,
		MaxBodyBytes:       a.Config.Gateway.MaxBodyBytes,
		FailOpen:           s.StoreFailure == "open",
		StoreTimeout:       s.StoreTimeout,
		Logger:             a.Log,
		Now:                a.Clock,
		Sleep:              a.Sleep,
		Classes:            a.Config.Shaping.Classes,
		DefaultClass:       a.Config.Shaping.DefaultClass,
		ClampFloor:         a.Config.Gateway.ClampFloor,

		Metrics:               a.Metrics,
		RealtimeMaxSession:    a.Config.Gateway.RealtimeMaxSession,
		RealtimeSessionTokens: a.Config.Gateway.RealtimeSessionTokens,
	}
	for class, f := range a.Config.Shaping.Fallbacks {
		if pc.Fallbacks == nil {
			pc.Fallbacks = map[string]admission.Fallback{}
		}
		pc.Fallbacks[class], _ = admission.ParseFallback(f) // checked by config
	}
	for class, sp := range a.Config.Shaping.Streams {
		if pc.Streams == nil {
			pc.Streams = map[string]admission.StreamLimit{}
		}
		pc.Streams[class] = admission.StreamLimit{MaxDuration: sp.MaxDuration, CutAtReservation: sp.CutAtReservation}
	}
	pc.Downgrades = admissionDowngrades(configDowngrades(a.Config.Downgrades))
	if len(a.Config.Migrations) > 0 {
		pc.Migrations = a.migrationsInForce
	}
	if c, ok := a.Store.(admission.Cooldowns); ok {
		pc.Cooldowns = c
	}
	if u, ok := a.Store.(admission.UpstreamRecorder); ok {
		pc.Upstream = u
	}
	if a.stats != nil {
		pc.Observer = a.stats
	}
	if a.Config.RateLimitsEnabled {
		pc.Refresh = a.Watcher
		pc.Pauses = a.Watcher.Pauses
		pc.ManagedDowngrades = managedDowngrades(a.Watcher)
	}
	if es, ok := a.ConfigStore.(estimateStore); ok {
		pc.Estimates = a.estimates(es)
		pc.AdaptiveFloor = a.Config.Gateway.AdaptiveFloor
		pc.AdaptiveCapped = a.Config.Gateway.Reservation == "adaptive"
	}
	return pc
}

// upstreamReader is the store's reader of upstream reports, if it has one.
func upstreamReader(s limiter.Store) adminapi.UpstreamReader {
	if r, ok := s.(adminapi.UpstreamReader); ok {
		return r
	}
	return nil
}

// explainer is the admin API's Explainer: the gateway's own admission
// when this process runs the gateway, else one built on first use over
// the configured providers (their keys are not needed to explain).
type explainer struct {
	a    *App
	once sync.Once
	adm  *admission.Orchestrator
	err  error
}

func (e *explainer) Explain(ctx context.Context, req admission.Request) (admission.Explanation, error) {
	e.once.Do(func() {
		if e.a.Gateway != nil {
			e.adm = e.a.Gateway.Admission()
			return
		}
		catalog, err := e.a.catalogOf(slices.Clone(e.a.Config.Providers))
		if err == nil {
			e.adm, err = admission.New(proxy.AdmissionConfig(e.a.gatewayConfig(catalog)))
		}
		if err != nil {
			e.err = fmt.Errorf("%w: %v", adminapi.ErrCannotExplain, err)
		}
	})
	if e.err != nil {
		return admission.Explanation{}, e.err
	}
	return e.adm.Explain(ctx, req)
}

// BuildAdmin builds the admin API.
func (a *App) BuildAdmin() error {
	s := a.Config.Settings
	if s.MasterKey == "" && s.InLambda {
		return errors.New("TOLLGATE_MASTER_KEY is required inside Lambda")
	}
	var config []limiter.Rule
	if a.Config.RateLimitsEnabled {
		config = a.Config.Rules
	}
	var err error
	var est admission.Estimates
	if es, ok := a.ConfigStore.(estimateStore); ok {
		est = a.estimates(es)
	}
	var stats metrics.StatsStore
	if ss, ok := a.Store.(metrics.StatsStore); ok {
		stats = ss
	}
	var listed []adminapi.Provider
	for _, p := range a.Config.Providers {
		ap := adminapi.Provider{Name: p.Name, Type: p.Type, Models: p.Models}
		for _, m := range p.Models {
			ap.Capabilities = append(ap.Capabilities, adminapi.CapabilitiesOf(m, providers.DeclaredCapabilities(m, p.Capabilities[m])))
		}
		listed = append(listed, ap)
	}
	var alerts adminapi.AlertLister
	if al, ok := a.ConfigStore.(adminapi.AlertLister); ok {
		alerts = al
	}
	a.Admin, err = adminapi.New(adminapi.Config{
		Alerts:         alerts,
		AlertsConfig:   a.AlertsSummary(),
		AuditRetention: a.Config.Audit.Retention,
		// A key revoked here is refused by this process's gateway at once.
		OnRevoke: func(hash string) {
			if a.keyCache != nil {
				a.keyCache.Forget(hash)
			}
		},
		Providers:        listed,
		Explainer:        &explainer{a: a},
		Upstream:         upstreamReader(a.Store),
		ConfigDowngrades: configDowngrades(a.Config.Downgrades),
		Stats:            stats,
		Estimates:        est,
		Store:            a.ConfigStore,
		ConfigRules:      config,
		Limiter:          a.Limiter,
		Watcher:          a.Watcher,
		MasterKey:        s.MasterKey,
		Prices:           a.Config.PriceTable(),
		Classes:          slices.Sorted(maps.Keys(a.Config.Shaping.Classes)),
		AdaptiveFloor:    a.Config.Gateway.AdaptiveFloor,
		DevMode:          s.MasterKey == "",
		Logger:           a.Log,
		Now:              a.Clock,
	})
	return err
}

// LocalHandler is the whole stack of a local process: the admin API under
// /admin/, the gateway everywhere else.
func (a *App) LocalHandler() http.Handler {
	mux := http.NewServeMux()
	if a.prom != nil {
		mux.Handle("GET /metrics", a.prom.Handler())
	}
	mux.Handle("/admin/", a.Admin)
	mux.Handle("/", a.Gateway)
	return mux
}

// keyResolver resolves managed keys for the gateway through a short cache.
type keyResolver struct {
	cache *configstore.KeyCache
	now   func() time.Time
}

func (k keyResolver) Lookup(ctx context.Context, secret string) (proxy.KeyInfo, error) {
	key, err := k.cache.Lookup(ctx, secret, k.now())
	switch {
	case errors.Is(err, configstore.ErrNotFound):
		return proxy.KeyInfo{}, proxy.ErrUnknownKey
	case errors.Is(err, configstore.ErrKeyNotLive):
		return proxy.KeyInfo{}, proxy.ErrRevokedKey
	}
	return proxy.KeyInfo{ID: key.ID, UserPath: key.UserPath, Tags: key.Tags, Class: key.Class, MaxClass: key.MaxClass}, err
}

// Close releases what the app holds.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// Exit reports err once and exits the process; for main functions only.
// Inside Lambda the report is the JSON log line CloudWatch keeps; in a
// terminal it is the text, one problem a line.
func Exit(log *slog.Logger, err error) {
	if os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" {
		log.Error("cannot start", "err", err.Error())
	} else {
		fmt.Fprintln(os.Stderr, "tollgate:", err)
	}
	os.Exit(1)
}

// rampHealth says whether a ramped rule's upstream stayed healthy since
// an instant: free of 429s (no cooldown of its provider, or its model
// there, ends after it) and not slower (its p95 latency, as this instance
// saw it, did not double against the interval before). An upstream 429 sets such a cooldown on every instance, so one
// instance's 429 holds the ramp for all. A store that cannot answer holds
// the ramp too.
func rampHealth(c admission.Cooldowns, cfg *config.Config, log *slog.Logger,
	slower func(key string, now time.Time, interval time.Duration) bool) func(context.Context, limiter.Rule, time.Time) bool {
	return func(ctx context.Context, r limiter.Rule, since time.Time) bool {
		var keys []string
		switch sub := strings.ToLower(r.Subject); {
		case r.Scope == limiter.ScopeProvider:
			keys = []string{sub + "/*"}
		case strings.Contains(sub, "/"):
			keys = []string{sub}
		default:
			for _, p := range cfg.Providers {
				keys = append(keys, strings.ToLower(p.Name)+"/"+sub)
			}
		}
		until, err := c.CooldownUntil(ctx, keys)
		if err != nil {
			log.Warn("could not read cooldowns for a ramp; holding it", "rule", r.ID(), "err", err)
			return false
		}
		for _, u := range until {
			if u.After(since) {
				return false
			}
		}
		now := since.Add(r.Ramp.Every)
		for _, k := range keys {
			if slower(k, now, r.Ramp.Every) {
				log.Info("ramp held: the upstream's p95 latency doubled over the interval", "rule", r.ID())
				return false
			}
		}
		return true
	}
}

// latencyDoubled asks the gateway, once built, whether an upstream slowed
// down; before it is, none did.
func (a *App) latencyDoubled(key string, now time.Time, interval time.Duration) bool {
	if a.Gateway == nil {
		return false
	}
	return a.Gateway.LatencyDoubled(key, now, interval)
}
