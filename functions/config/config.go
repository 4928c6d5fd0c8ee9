// Package config reads tollgate's configuration once at start: the YAML file
// named by TOLLGATE_CONFIG (default tollgate.yaml, if present), the
// SET_RATE_LIMIT_* and SET_PROVIDER_RATE_LIMIT_* variables, and the
// settings in the environment. Decoding is strict (unknown keys are errors)
// and every problem is reported together, each prefixed with where it came
// from: the file and line, or the variable.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/limiter"
)

// DefaultFile is read when TOLLGATE_CONFIG is unset and the file exists.
const DefaultFile = "tollgate.yaml"

// Config is everything tollgate is configured with.
type Config struct {
	// File is the YAML file read, or "" when there was none.
	File string
	// Rules are the config rules, from the file and the environment, all
	// marked limiter.SourceConfig.
	Rules []limiter.Rule
	// RateLimitsEnabled is false when the file says rate_limits.enabled:
	// false; rules are then loaded but not enforced.
	RateLimitsEnabled bool

	Gateway  Gateway
	Shaping  Shaping
	Store    StoreOptions
	Settings Settings
	Alerts   Alerts
	Audit    Audit

	// Providers are the provider instances; Aliases the virtual models.
	Providers []ProviderSpec
	Aliases   []AliasSpec
	// Downgrades are the downgrade rules (downgrade[]).
	Downgrades []DowngradeSpec
	// AdaptRules are the provider and model rules that follow what their
	// upstreams report (adapt: true).
	AdaptRules []limiter.RuleKey
	// Migrations are the migrations (migrations[]).
	Migrations []MigrationSpec

	// Prices are the configured model prices ("model" or
	// "provider/model"); DefaultPrice is prices.default, if given.
	Prices       map[string]limiter.Price
	DefaultPrice *limiter.Price
	// BudgetLocation is the zone budgets' calendar periods are aligned in
	// (budget_timezone, TOLLGATE_BUDGET_TIMEZONE; nil: UTC).
	BudgetLocation *time.Location
}

// StoreOptions tune the DynamoDB store (the file's store section).
type StoreOptions struct {
	// RejectCache lets a process refuse a charge on a counter that refused
	// within this long, without a round trip (0 = off, at most 1s).
	RejectCache time.Duration
	// TokenPrevRefresh is how long a closed token window's count is trusted
	// before it is read again (default 10s).
	TokenPrevRefresh time.Duration
}

// Shaping holds the shaping section: traffic classes and how long a
// request of each may wait out a refusal.
type Shaping struct {
	// Classes maps a class name to its longest wait (shaping.classes.<name>.max_wait).
	Classes map[string]time.Duration
	// DefaultClass is the class of a request that names none
	// (shaping.default_class); "" is none, which waits for nothing.
	DefaultClass string
	// Fallbacks maps a class to its policy for targets other than a
	// request's first choice (shaping.classes.<name>.fallback): any (the
	// default, not listed), same_family or none.
	Fallbacks map[string]string
	// Streams maps a class to how long its streams may run and whether
	// they end at their reservation (shaping.classes.<name>.max_stream_duration,
	// cut_at_reservation); classes with neither are not listed.
	Streams map[string]StreamSpec
}

// Gateway holds the gateway options of the file's gateway section.
type Gateway struct {
	// DefaultMaxTokens is the output reservation of a request that sets no
	// max_tokens (or its equivalents).
	DefaultMaxTokens int64
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	MaxBodyBytes int64
	// LeaseTTL bounds how long a request whose process died holds its slot.
	LeaseTTL time.Duration
	// ClampFloor lets a request refused for its token reservation go with
	// a lower output cap of at least this many tokens
	// (gateway.clamp_max_tokens_floor; 0 = off).
	ClampFloor int64
	// RealtimeMaxSession is how long a Realtime session holds its slot
	// unless ended (gateway.realtime_max_session, 30m);
	// RealtimeSessionTokens what it reserves (gateway.realtime_session_tokens, 0).
	RealtimeMaxSession    time.Duration
	RealtimeSessionTokens int64
	// Reservation is "cap" (requests with an output cap reserve it) or
	// "adaptive" (they reserve the learned p95 too, never above the cap);
	// requests without a cap reserve the learned p95 either way, at least
	// AdaptiveFloor, once AdaptiveMinSamples requests were seen.
	Reservation        string
	AdaptiveFloor      int64
	AdaptiveMinSamples int64
	// MaxOutputTokens caps every output reservation, for models whose
	// maximum output is not known (gateway.max_output_tokens, 128000).
	MaxOutputTokens int64
	// StreamWriteTimeout bounds each write to a client, so one that stops
	// reading cannot hold its slot (gateway.stream_write_timeout, 30s).
	StreamWriteTimeout time.Duration
	// CompletionTimeout bounds the retries of the write that records a
	// request's usage and gives back its slot (gateway.completion_timeout,
	// 30s, and never past the function's own deadline).
	CompletionTimeout time.Duration
}

// Env is the process environment as a map.
type Env map[string]string

// Environ returns the process environment.
func Environ() Env {
	env := Env{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// Load reads the configuration from the environment and the file it names.
func Load(env Env) (*Config, error) {
	cfg := &Config{
		RateLimitsEnabled: true,
		Shaping:           Shaping{Classes: proxyDefaultClasses()},
		Alerts:            Alerts{Every: 30 * time.Second},
		Audit:             Audit{Retention: 90 * 24 * time.Hour},
		Gateway: Gateway{
			DefaultMaxTokens:   1024,
			MaxBodyBytes:       10 << 20,
			LeaseTTL:           limiter.DefaultLeaseTTL,
			MaxOutputTokens:    128_000,
			StreamWriteTimeout: 30 * time.Second,
			CompletionTimeout:  30 * time.Second,
			Reservation:        "cap",
			AdaptiveFloor:      64,
			AdaptiveMinSamples: 20,
		},
	}
	var errs []error
	settings, err := loadSettings(env)
	cfg.Settings = settings
	errs = append(errs, err)

	// Unset: tollgate.yaml if there is one. Set but empty: no file.
	path, explicit := env["TOLLGATE_CONFIG"]
	if !explicit {
		path = DefaultFile
	}
	var data []byte
	err = os.ErrNotExist
	if path != "" {
		data, err = os.ReadFile(path)
	}
	switch {
	case path == "":
	case err == nil:
		cfg.File = path
		errs = append(errs, cfg.loadFile(path, data))
	case errors.Is(err, os.ErrNotExist) && !explicit:
		// No file is fine: rules can come from the environment alone.
	default:
		errs = append(errs, fmt.Errorf("TOLLGATE_CONFIG: %w", err))
	}

	envRules, err := rulesFromEnv(env)
	errs = append(errs, err)
	envBudgets, err := budgetsFromEnv(env)
	errs = append(errs, err, cfg.budgetLocationFromEnv(env))
	errs = append(errs, cfg.finishProviders(env), cfg.finishAlerts(env))
	cfg.Rules = append(cfg.Rules, envRules...)
	cfg.Rules = WithBudgetLocation(append(cfg.Rules, envBudgets...), cfg.BudgetLocation)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Duplicates across sources, and anything else the rule set refuses.
	if _, err := limiter.NewRules(cfg.Rules); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return cfg, nil
}

// file is the YAML document.
type file struct {
	RateLimits     *rateLimits          `yaml:"rate_limits"`
	Budgets        *budgetsSpec         `yaml:"budgets"`
	BudgetTimezone string               `yaml:"budget_timezone"`
	Prices         map[string]priceSpec `yaml:"prices"`
	Gateway        *gatewaySpec         `yaml:"gateway"`
	Shaping        *shapingSpec         `yaml:"shaping"`
	Store          *storeSpec           `yaml:"store"`
	Providers      []providerYAML       `yaml:"providers"`
	Models         []aliasYAML          `yaml:"models"`
	Alerts         *alertsSpec          `yaml:"alerts"`
	Audit          *auditSpec           `yaml:"audit"`
	Downgrade      []downgradeYAML      `yaml:"downgrade"`
	Migrations     []migrationYAML      `yaml:"migrations"`
}

type storeSpec struct {
	RejectCache      string `yaml:"reject_cache"`
	TokenPrevRefresh string `yaml:"token_prev_refresh"`
	// LeaseIndexShards is accepted, and unused, so that files written
	// for versions whose lease table had an expiry index still load.
	LeaseIndexShards int `yaml:"lease_index_shards"`
}

type rateLimits struct {
	Enabled   *bool          `yaml:"enabled"`
	UserPaths []userPathSpec `yaml:"user_paths"`
	Providers []providerSpec `yaml:"providers"`
	Models    []modelSpec    `yaml:"models"`
	Tags      []tagRuleSpec  `yaml:"tags"`
	Keys      []keyRuleSpec  `yaml:"keys"`
}

type userPathSpec struct {
	Path     string      `yaml:"path"`
	PerChild bool        `yaml:"per_child"`
	Limits   []limitSpec `yaml:"limits"`
}

// providerSpec and modelSpec accept per_child only to refuse it with a
// clear reason rather than as an unknown key.
type providerSpec struct {
	Name     string      `yaml:"name"`
	PerChild bool        `yaml:"per_child"`
	Limits   []limitSpec `yaml:"limits"`
}

type modelSpec struct {
	Model    string      `yaml:"model"`
	PerChild bool        `yaml:"per_child"`
	Limits   []limitSpec `yaml:"limits"`
}

// limitSpec is one period's limits, in YAML and in the JSON form of the
// environment variables.
type limitSpec struct {
	Period          string `yaml:"period" json:"period"`
	PeriodSeconds   int64  `yaml:"period_seconds" json:"period_seconds"`
	MaxRequests     int64  `yaml:"max_requests" json:"max_requests"`
	MaxTokens       int64  `yaml:"max_tokens" json:"max_tokens"`
	MaxInputTokens  int64  `yaml:"max_input_tokens" json:"max_input_tokens"`
	MaxOutputTokens int64  `yaml:"max_output_tokens" json:"max_output_tokens"`
	// MaxStreams limits the streaming requests in flight, apart from the
	// rest (a gauge of its own); MaxStreamDuration bounds how long each
	// may run.
	MaxStreams        int64  `yaml:"max_streams" json:"max_streams"`
	MaxStreamDuration string `yaml:"max_stream_duration" json:"max_stream_duration"`
	Shards            int    `yaml:"shards" json:"shards"`
	// Window is sliding (default) or fixed.
	Window string `yaml:"window" json:"window"`
	// Quota is standard (default) or bedrock: Bedrock's arithmetic for
	// max_tokens (input + max output × the model's output burndown).
	Quota string `yaml:"quota" json:"quota"`
	// Capacity and RefillPerSecond make a token bucket instead of a
	// window, of requests or (Unit tokens) tokens.
	Capacity        int64   `yaml:"capacity" json:"capacity"`
	RefillPerSecond float64 `yaml:"refill_per_second" json:"refill_per_second"`
	Unit            string  `yaml:"unit" json:"unit"`
	Priority        int     `yaml:"priority" json:"priority"`
	Always          bool    `yaml:"always" json:"always"`
	Shadow          bool    `yaml:"shadow" json:"shadow"`
	// Ramp grows a provider or model window's limit from start by step
	// every interval, to the rule's limit.
	Ramp *rampSpec `yaml:"ramp" json:"ramp"`
	// FairShare shares the limit among members by weight.
	FairShare *fairShareSpec `yaml:"fair_share" json:"fair_share"`
	// Adapt, on a provider or model window of a minute, lowers its limits
	// to what the upstream reports it enforces.
	Adapt bool `yaml:"adapt" json:"-"`
	// PerChild is accepted in the JSON form only, where there is no
	// enclosing path entry to carry it.
	PerChild bool `yaml:"-" json:"per_child"`
}

type fairShareSpec struct {
	By            string           `yaml:"by" json:"by"`
	Weights       map[string]int64 `yaml:"weights" json:"weights"`
	DefaultWeight int64            `yaml:"default_weight" json:"default_weight"`
	MaxMembers    int              `yaml:"max_members" json:"max_members"`
}

func (fs *fairShareSpec) fairShare() *limiter.FairShare {
	f := &limiter.FairShare{By: fs.By, Weights: map[string]int64{}, DefaultWeight: fs.DefaultWeight, MaxMembers: fs.MaxMembers}
	for name, w := range fs.Weights {
		if fs.By == "user_path" {
			name = strings.ToLower(name)
		}
		f.Weights[name] = w
	}
	return f
}

type rampSpec struct {
	Start int64  `yaml:"start" json:"start"`
	Step  int64  `yaml:"step" json:"step"`
	Every string `yaml:"every" json:"every"`
	Max   int64  `yaml:"max" json:"max"`
}

type gatewaySpec struct {
	DefaultMaxTokens *int64 `yaml:"default_max_tokens"`
	MaxBodyBytes     *int64 `yaml:"max_body_bytes"`
	LeaseTTL         string `yaml:"lease_ttl"`
	// MaxWait is refused with the way to the classes that replaced it,
	// whatever its shape (a duration or a map of routes).
	MaxWait         yaml.Node `yaml:"max_wait"`
	ClampFloor      int64     `yaml:"clamp_max_tokens_floor"`
	MaxOutputTokens *int64    `yaml:"max_output_tokens"`
	StreamWrite     string    `yaml:"stream_write_timeout"`
	Completion      string    `yaml:"completion_timeout"`
	RealtimeSession string    `yaml:"realtime_max_session"`
	RealtimeTokens  int64     `yaml:"realtime_session_tokens"`
	Reservation     string    `yaml:"reservation"`
	AdaptiveFloor   *int64    `yaml:"adaptive_floor"`
	AdaptiveSamples *int64    `yaml:"adaptive_min_samples"`
}

// maxRequestTokens bounds every token count in the configuration, as
// providers.MaxRequestTokens bounds the clients'.
const maxRequestTokens = 1<<31 - 1

func (cfg *Config) loadFile(path string, data []byte) error {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// A type error (an unknown key, a string where a number goes) leaves
	// the rest decoded: it is reported with every other problem, in one
	// pass, not one run at a time.
	var errs []error
	if err := dec.Decode(&f); err != nil {
		var te *yaml.TypeError
		switch {
		case errors.Is(err, errEOF):
			return nil // empty file
		case !errors.As(err, &te):
			return yamlError(path, err)
		}
		errs = append(errs, yamlError(path, err))
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root)
	at := func(keys ...any) string {
		loc := path
		if line := lineOf(&root, keys...); line > 0 {
			loc = fmt.Sprintf("%s:%d", path, line)
		}
		return loc + ": " + dotted(keys...)
	}

	if f.RateLimits != nil {
		errs = append(errs, cfg.loadRateLimits(f.RateLimits, at)...)
	}
	if f.Gateway != nil {
		errs = append(errs, cfg.loadGateway(f.Gateway, at)...)
	}
	errs = append(errs, cfg.loadPolicy(&f, at))
	if f.Alerts != nil {
		errs = append(errs, cfg.loadAlerts(f.Alerts, at)...)
	}
	if f.Audit != nil {
		errs = append(errs, cfg.loadAudit(f.Audit, at)...)
	}
	errs = append(errs, cfg.loadProviders(f.Providers, at), cfg.loadAliases(f.Models, at), cfg.loadDowngrades(f.Downgrade, at))
	errs = append(errs, cfg.loadMigrations(f.Migrations, at))
	if f.Store != nil {
		errs = append(errs, cfg.loadStore(f.Store, at)...)
	}
	if sh := f.Shaping; sh != nil {
		errs = append(errs, cfg.loadShaping(sh, at))
	}
	errs = append(errs, cfg.checkDowngrades(at))
	return errors.Join(errs...)
}

// loadRateLimits reads rate_limits: whether they are enforced, and the
// rules of user paths, providers and models.
func (cfg *Config) loadRateLimits(rl *rateLimits, at func(keys ...any) string) []error {
	var errs []error
	if rl.Enabled != nil {
		cfg.RateLimitsEnabled = *rl.Enabled
	}
	for i, u := range rl.UserPaths {
		if u.Path == "" {
			errs = append(errs, fmt.Errorf("%s: path is missing", at("rate_limits", "user_paths", i)))
			continue
		}
		errs = append(errs, cfg.addLimits(at, []any{"rate_limits", "user_paths", i}, limiter.ScopeUserPath, u.Path, u.PerChild, u.Limits)...)
		if len(u.Limits) == 0 {
			errs = append(errs, fmt.Errorf("%s: no limits", at("rate_limits", "user_paths", i)))
		}
	}
	for i, p := range rl.Providers {
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("%s: name is missing", at("rate_limits", "providers", i)))
			continue
		}
		errs = append(errs, cfg.addLimits(at, []any{"rate_limits", "providers", i}, limiter.ScopeProvider, p.Name, p.PerChild, p.Limits)...)
	}
	for i, m := range rl.Models {
		if m.Model == "" {
			errs = append(errs, fmt.Errorf("%s: model is missing", at("rate_limits", "models", i)))
			continue
		}
		errs = append(errs, cfg.addLimits(at, []any{"rate_limits", "models", i}, limiter.ScopeModel, m.Model, m.PerChild, m.Limits)...)
	}
	return errs
}

// loadGateway reads gateway: request sizes, timeouts, reservations,
// realtime sessions, clamping and leases, each checked against its range.
func (cfg *Config) loadGateway(g *gatewaySpec, at func(keys ...any) string) []error {
	var errs []error
	if g.DefaultMaxTokens != nil {
		if *g.DefaultMaxTokens < 1 || *g.DefaultMaxTokens > maxRequestTokens {
			errs = append(errs, fmt.Errorf("%s: must be from 1 to %d", at("gateway", "default_max_tokens"), maxRequestTokens))
		}
		cfg.Gateway.DefaultMaxTokens = *g.DefaultMaxTokens
	}
	if g.MaxOutputTokens != nil {
		if *g.MaxOutputTokens < 1 || *g.MaxOutputTokens > maxRequestTokens {
			errs = append(errs, fmt.Errorf("%s: must be from 1 to %d", at("gateway", "max_output_tokens"), maxRequestTokens))
		}
		cfg.Gateway.MaxOutputTokens = *g.MaxOutputTokens
	}
	for _, d := range []struct {
		key string
		v   string
		to  *time.Duration
	}{
		{"stream_write_timeout", g.StreamWrite, &cfg.Gateway.StreamWriteTimeout},
		{"completion_timeout", g.Completion, &cfg.Gateway.CompletionTimeout},
	} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v < 100*time.Millisecond || v > 15*time.Minute {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration from 100ms to 15m", at("gateway", d.key), d.v))
		}
		*d.to = v
	}
	if g.MaxBodyBytes != nil {
		if *g.MaxBodyBytes < 1024 {
			errs = append(errs, fmt.Errorf("%s: must be at least 1024", at("gateway", "max_body_bytes")))
		}
		cfg.Gateway.MaxBodyBytes = *g.MaxBodyBytes
	}
	if g.MaxWait.Kind != 0 {
		errs = append(errs, fmt.Errorf("%s: replaced by traffic classes: shaping.classes.<interactive|standard|batch|background>.max_wait (see README, Traffic classes)", at("gateway", "max_wait")))
	}
	errs = append(errs, cfg.loadReservation(g, at)...)
	if g.RealtimeSession != "" {
		d, err := time.ParseDuration(g.RealtimeSession)
		if err != nil || d < time.Minute || d > 24*time.Hour {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration from 1m to 24h", at("gateway", "realtime_max_session"), g.RealtimeSession))
		}
		cfg.Gateway.RealtimeMaxSession = d
	}
	if g.RealtimeTokens < 0 || g.RealtimeTokens > maxRequestTokens {
		errs = append(errs, fmt.Errorf("%s: must be from 0 to %d", at("gateway", "realtime_session_tokens"), maxRequestTokens))
	}
	cfg.Gateway.RealtimeSessionTokens = g.RealtimeTokens
	if g.ClampFloor < 0 {
		errs = append(errs, fmt.Errorf("%s: must not be negative", at("gateway", "clamp_max_tokens_floor")))
	}
	cfg.Gateway.ClampFloor = g.ClampFloor
	if g.LeaseTTL != "" {
		d, err := time.ParseDuration(g.LeaseTTL)
		if err != nil || d < time.Second {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration of at least 1s", at("gateway", "lease_ttl"), g.LeaseTTL))
		}
		cfg.Gateway.LeaseTTL = d
	}
	return errs
}

// loadReservation reads how the gateway reserves output tokens: the
// cap or the adaptive estimate, with its floor and its samples.
func (cfg *Config) loadReservation(g *gatewaySpec, at func(keys ...any) string) []error {
	var errs []error
	switch g.Reservation {
	case "":
	case "cap", "adaptive":
		cfg.Gateway.Reservation = g.Reservation
	default:
		errs = append(errs, fmt.Errorf("%s: %q is neither cap nor adaptive", at("gateway", "reservation"), g.Reservation))
	}
	if v := g.AdaptiveFloor; v != nil {
		if *v < 1 || *v > maxRequestTokens {
			errs = append(errs, fmt.Errorf("%s: must be from 1 to %d", at("gateway", "adaptive_floor"), maxRequestTokens))
		}
		cfg.Gateway.AdaptiveFloor = *v
	}
	if v := g.AdaptiveSamples; v != nil {
		if *v < 1 {
			errs = append(errs, fmt.Errorf("%s: must be at least 1", at("gateway", "adaptive_min_samples")))
		}
		cfg.Gateway.AdaptiveMinSamples = *v
	}
	return errs
}

// loadStore reads store: the reject cache, the token refresh and the
// lease index's shards.
func (cfg *Config) loadStore(st *storeSpec, at func(keys ...any) string) []error {
	var errs []error
	if st.RejectCache != "" {
		d, err := time.ParseDuration(st.RejectCache)
		if err != nil || d < 0 || d > time.Second {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration between 0s and 1s", at("store", "reject_cache"), st.RejectCache))
		}
		cfg.Store.RejectCache = d
	}
	if st.TokenPrevRefresh != "" {
		d, err := time.ParseDuration(st.TokenPrevRefresh)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", at("store", "token_prev_refresh"), st.TokenPrevRefresh))
		}
		cfg.Store.TokenPrevRefresh = d
	}
	return errs
}

// rule turns a limit spec into a config rule and checks it: a bucket when
// it has a bucket's fields (capacity, refill_per_second, unit), else a
// window, or a gauge for the period concurrent.
func (l limitSpec) rule(scope limiter.Scope, subject string) (limiter.Rule, error) {
	r := limiter.Rule{
		Scope:    scope,
		Subject:  subject,
		PerChild: l.PerChild,
		Shards:   l.Shards,
		Priority: l.Priority,
		Always:   l.Always,
		Shadow:   l.Shadow,
		Source:   limiter.SourceConfig,
	}
	if fs := l.FairShare; fs != nil {
		r.FairShare = fs.fairShare()
	}
	if l.Capacity != 0 || l.RefillPerSecond != 0 || l.Unit != "" {
		var errs []error
		r.Limit, errs = l.bucket()
		return r, errors.Join(append(errs, r.Validate())...)
	}
	if l.MaxStreams != 0 || l.MaxStreamDuration != "" {
		var errs []error
		r.Limit, errs = l.streams()
		return r, errors.Join(append(errs, r.Validate())...)
	}
	var errs []error
	r.Limit, errs = l.windowOrGauge()
	r.Ramp, errs = l.ramp(errs)
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	return r, r.Validate()
}

// window returns the window the spec's window fields describe, with no
// period, and what is wrong with them.
func (l limitSpec) window() (limiter.Window, []error) {
	fixed, err := limiter.ParseWindow(l.Window)
	q, qerr := limiter.ParseQuota(l.Quota)
	w := limiter.Window{
		Fixed:           fixed,
		MaxRequests:     l.MaxRequests,
		MaxTokens:       l.MaxTokens,
		MaxInputTokens:  l.MaxInputTokens,
		MaxOutputTokens: l.MaxOutputTokens,
		Quota:           q,
	}
	return w, []error{err, qerr}
}

// bucket returns the bucket of a spec with a bucket's fields, and a
// problem for each field of a window it has.
func (l limitSpec) bucket() (limiter.Bucket, []error) {
	b := limiter.Bucket{Capacity: l.Capacity, RefillPerSecond: l.RefillPerSecond}
	var errs []error
	switch l.Unit {
	case "", "requests":
	case "tokens":
		b.Tokens = true
	default:
		errs = append(errs, fmt.Errorf("unit: %q is neither requests nor tokens", l.Unit))
	}
	if l.Period != "" || l.PeriodSeconds != 0 {
		errs = append(errs, errors.New("period: a bucket (capacity, refill_per_second) has no period"))
	}
	if l.Window != "" {
		errs = append(errs, errors.New("window: a bucket has no window"))
	}
	if l.Ramp != nil {
		errs = append(errs, errors.New("ramp: only request and token windows ramp"))
	}
	w, werrs := l.window()
	w.Fixed = false // reported above
	errs = append(errs, werrs[1:]...)
	return b, append(errs, limiter.Misplaced(w, b)...)
}

// windowOrGauge returns the window of the spec's period, or for the
// period concurrent the gauge of its max_requests, with a problem for
// each window field a gauge has not.
func (l limitSpec) windowOrGauge() (limiter.Limit, []error) {
	w, errs := l.window()
	gauge := false
	switch {
	case l.Period != "" && l.PeriodSeconds != 0:
		errs = append(errs, errors.New("period and period_seconds are both set; use one"))
	case l.Period == limiter.PeriodConcurrent:
		gauge = true
	case l.Period != "":
		p, err := limiter.ParsePeriod(l.Period)
		errs = append(errs, err)
		w.Period = p
	case l.PeriodSeconds > 0:
		w.Period = time.Duration(l.PeriodSeconds) * time.Second
	case l.PeriodSeconds < 0:
		errs = append(errs, fmt.Errorf("period_seconds: negative period %d", l.PeriodSeconds))
	default:
		errs = append(errs, errors.New("period: missing (want minute, hour, day, concurrent or period_seconds)"))
	}
	if l.MaxRequests == 0 && l.MaxTokens == 0 && l.MaxInputTokens == 0 && l.MaxOutputTokens == 0 {
		errs = append(errs, errors.New("no limit set (max_requests, max_tokens, max_input_tokens or max_output_tokens; or capacity and refill_per_second)"))
	}
	if gauge {
		return limiter.Gauge{MaxInFlight: l.MaxRequests}, append(errs, limiter.Misplaced(w, limiter.Gauge{})...)
	}
	return w, errs
}

// ramp returns the spec's ramp, which ends at the rule's limit, appending
// what is wrong with it to errs.
func (l limitSpec) ramp(errs []error) (*limiter.Ramp, []error) {
	rs := l.Ramp
	if rs == nil {
		return nil, errs
	}
	every, err := time.ParseDuration(rs.Every)
	if err != nil {
		errs = append(errs, fmt.Errorf("ramp.every: %q is not a duration", rs.Every))
	}
	limit := cmp.Or(l.MaxRequests, l.MaxTokens)
	if rs.Max != 0 && rs.Max != limit {
		errs = append(errs, fmt.Errorf("ramp.max: %d differs from the rule's limit %d, where the ramp ends (leave it out)", rs.Max, limit))
	}
	return &limiter.Ramp{Start: rs.Start, Step: rs.Step, Every: every, Max: limit}, errs
}

// addLimits adds the rules one subject's limits make, and returns their
// problems, each at its place under where (the subject's YAML keys).
func (cfg *Config) addLimits(at func(keys ...any) string, where []any, scope limiter.Scope, subject string, perChild bool, limits []limitSpec) []error {
	var errs []error
	for j, l := range limits {
		l.PerChild = perChild
		r, err := l.rule(scope, subject)
		here := at(slices.Concat(where, []any{"limits", j})...)
		errs = append(errs, prefix(here, err))
		cfg.Rules = appendIfValid(cfg.Rules, r, err)
		if l.Adapt && err == nil {
			if e := adaptProblem(r); e != nil {
				errs = append(errs, fmt.Errorf("%s: adapt: %w", here, e))
			} else {
				cfg.AdaptRules = append(cfg.AdaptRules, r.Key())
			}
		}
	}
	return errs
}

// adaptProblem says why rule r cannot follow its upstream's reports:
// only a one-minute window of a provider, or of a provider's model,
// limiting requests or tokens, is what an upstream reports.
func adaptProblem(r limiter.Rule) error {
	w, window := r.Limit.(limiter.Window)
	switch {
	case r.Scope != limiter.ScopeProvider && r.Scope != limiter.ScopeModel:
		return errors.New("only provider and model rules follow what an upstream reports")
	case r.Scope == limiter.ScopeModel && !strings.Contains(r.Subject, "/"):
		return fmt.Errorf("name the model at its provider (provider/%s): the report is one provider's", r.Subject)
	case !window || w.Period != limiter.Minute || (w.MaxRequests == 0 && w.MaxTokens == 0):
		return errors.New("upstreams report per-minute limits of requests and tokens: adapt a window of period minute with max_requests or max_tokens")
	}
	return nil
}

func appendIfValid(rules []limiter.Rule, r limiter.Rule, err error) []limiter.Rule {
	if err != nil {
		return rules
	}
	return append(rules, r)
}

func prefix(where string, err error) error {
	if err == nil {
		return nil
	}
	var msgs []string
	for _, e := range unjoin(err) {
		msgs = append(msgs, where+": "+e.Error())
	}
	return errors.New(strings.Join(msgs, "\n"))
}

// unjoin flattens errors.Join trees.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// lineOf returns the line of the node at keys (strings index mappings,
// ints sequences) in a parsed document, or 0.
func lineOf(root *yaml.Node, keys ...any) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return 0
			}
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					next = n.Content[i+1]
				}
			}
			if next == nil {
				return 0
			}
			n = next
		case int:
			if n.Kind != yaml.SequenceNode || k >= len(n.Content) {
				return 0
			}
			n = n.Content[k]
		}
	}
	return n.Line
}

func dotted(keys ...any) string {
	var b strings.Builder
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		case int:
			fmt.Fprintf(&b, "[%d]", k)
		}
	}
	return b.String()
}

var fieldNotFound = regexp.MustCompile(`^line (\d+): field (\S+) not found in type`)
var atLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlError rewrites the decoder's errors as "file:line: reason", one per
// line, naming unknown keys plainly.
func yamlError(path string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %w", path, err)
	}
	var errs []error
	for _, e := range te.Errors {
		if m := fieldNotFound.FindStringSubmatch(e); m != nil {
			errs = append(errs, fmt.Errorf("%s:%s: unknown key %q", path, m[1], m[2]))
		} else if m := atLine.FindStringSubmatch(e); m != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", path, m[1], m[2]))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", path, e))
		}
	}
	return errors.Join(errs...)
}

// proxyDefaultClasses are the classes with their default waits, as the
// gateway defines them (proxy.DefaultClasses, which config cannot import).
func proxyDefaultClasses() map[string]time.Duration {
	return map[string]time.Duration{
		"interactive": 300 * time.Millisecond, "standard": 2 * time.Second,
		"batch": 20 * time.Second, "background": time.Minute,
	}
}

func validClassName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
