package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
)

// ProviderSpec is one provider instance.
type ProviderSpec struct {
	Name string
	// Type is openai, azure, anthropic, gemini, compatible (any
	// OpenAI-compatible server) or mock.
	Type    string
	BaseURL string
	// The API key comes from exactly one of: an environment variable
	// (APIKeyEnv, default <NAME>_API_KEY), an SSM parameter, or a Secrets
	// Manager secret. APIKey holds it once resolved.
	APIKeyEnv       string
	APIKeyParameter string
	APIKeySecret    string
	APIKey          string
	// Models the instance serves (for /v1/models and bare ids); empty means
	// any model id. Capabilities are what providers[].models objects
	// declare of some of them, by id.
	Models       []string
	Capabilities map[string]providers.Capabilities
	// Azure OpenAI only.
	APIVersion  string
	Deployments map[string]string
	// Timeout bounds the wait for an answer's headers.
	Timeout time.Duration
	// Bedrock only: the region ("" is the SDK's, AWS_REGION), per-model
	// output burndown overrides (model id or id prefix → factor), and the
	// service tier each traffic class asks for. Bedrock's BaseURL is its
	// endpoint, from base_url, <NAME>_BASE_URL or
	// AWS_ENDPOINT_URL_BEDROCK_RUNTIME; "" is the SDK's.
	Region       string
	Burndown     map[string]int64
	ServiceTiers map[string]string
}

// AliasSpec is a virtual model.
type AliasSpec struct {
	Name     string
	Strategy string // failover (default) or weighted
	Targets  []AliasTarget
}

// AliasTarget is one "provider/model" target of an alias.
type AliasTarget struct {
	Model  string
	Weight int
}

// providerTypes are the adapters, with their default base URLs.
var providerTypes = map[string]string{
	"openai":     "https://api.openai.com/v1",
	"azure":      "",
	"anthropic":  "https://api.anthropic.com",
	"gemini":     "https://generativelanguage.googleapis.com",
	"compatible": "",
	"bedrock":    "",
	"mock":       "",
}

type providerYAML struct {
	Name            string            `yaml:"name"`
	Type            string            `yaml:"type"`
	BaseURL         string            `yaml:"base_url"`
	APIKeyEnv       string            `yaml:"api_key_env"`
	APIKeyParameter string            `yaml:"api_key_parameter"`
	APIKeySecret    string            `yaml:"api_key_secret"`
	Models          []modelYAML       `yaml:"models"`
	APIVersion      string            `yaml:"api_version"`
	Deployments     map[string]string `yaml:"deployments"`
	Timeout         string            `yaml:"timeout"`
	Region          string            `yaml:"region"`
	Burndown        map[string]int64  `yaml:"burndown"`
	ServiceTiers    map[string]string `yaml:"service_tiers"`
}

type aliasYAML struct {
	Name     string `yaml:"name"`
	Strategy string `yaml:"strategy"`
	Targets  []struct {
		Model  string `yaml:"model"`
		Weight int    `yaml:"weight"`
	} `yaml:"targets"`
}

// EnvName turns a provider name into the stem of its variables:
// "openai-eu" is OPENAI_EU (OPENAI_EU_API_KEY, OPENAI_EU_BASE_URL).
func EnvName(name string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

func (cfg *Config) loadProviders(specs []providerYAML, at func(...any) string) error {
	var errs []error
	seen := map[string]bool{}
	for i, p := range specs {
		where := at("providers", i)
		switch {
		case p.Name == "":
			errs = append(errs, fmt.Errorf("%s: name is missing", where))
			continue
		case strings.ContainsAny(p.Name, "/ \t"):
			errs = append(errs, fmt.Errorf("%s: name %q may not contain '/' or spaces", where, p.Name))
			continue
		case seen[strings.ToLower(p.Name)]:
			errs = append(errs, fmt.Errorf("%s: provider %q is defined twice", where, p.Name))
			continue
		}
		seen[strings.ToLower(p.Name)] = true
		if _, ok := providerTypes[p.Type]; !ok {
			errs = append(errs, fmt.Errorf("%s: type %q is not one of openai, azure, anthropic, gemini, compatible, bedrock, mock", where, p.Type))
			continue
		}
		spec := ProviderSpec{
			Name: p.Name, Type: p.Type, BaseURL: p.BaseURL,
			APIKeyEnv: p.APIKeyEnv, APIKeyParameter: p.APIKeyParameter, APIKeySecret: p.APIKeySecret,
			APIVersion: p.APIVersion, Deployments: p.Deployments,
			Region: p.Region, Burndown: p.Burndown, ServiceTiers: p.ServiceTiers,
		}
		errs = append(errs, loadModels(&spec, p.Models, at, i)...)
		sources := 0
		for _, s := range []string{p.APIKeyEnv, p.APIKeyParameter, p.APIKeySecret} {
			if s != "" {
				sources++
			}
		}
		if sources > 1 {
			errs = append(errs, fmt.Errorf("%s: give the key by one of api_key_env, api_key_parameter or api_key_secret", where))
		}
		if p.Timeout != "" {
			d, err := time.ParseDuration(p.Timeout)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%s: timeout %q is not a positive duration", at("providers", i, "timeout"), p.Timeout))
			}
			spec.Timeout = d
		}
		if (p.APIVersion != "" || len(p.Deployments) > 0) && p.Type != "azure" {
			errs = append(errs, fmt.Errorf("%s: api_version and deployments are for azure providers", where))
		}
		errs = append(errs, bedrockProblems(p, sources, at, i)...)
		cfg.Providers = append(cfg.Providers, spec)
	}
	return errors.Join(errs...)
}

func (cfg *Config) loadAliases(specs []aliasYAML, at func(...any) string) error {
	var errs []error
	for i, a := range specs {
		where := at("models", i)
		if a.Name == "" {
			errs = append(errs, fmt.Errorf("%s: name is missing", where))
			continue
		}
		if a.Strategy != "" && a.Strategy != "failover" && a.Strategy != "weighted" {
			errs = append(errs, fmt.Errorf("%s: strategy %q is neither failover nor weighted", where, a.Strategy))
		}
		if len(a.Targets) == 0 {
			errs = append(errs, fmt.Errorf("%s: no targets", where))
		}
		spec := AliasSpec{Name: a.Name, Strategy: a.Strategy}
		for j, t := range a.Targets {
			if !strings.Contains(t.Model, "/") {
				errs = append(errs, fmt.Errorf("%s: %q is not provider/model", at("models", i, "targets", j), t.Model))
			}
			if t.Weight < 0 {
				errs = append(errs, fmt.Errorf("%s: negative weight", at("models", i, "targets", j)))
			}
			spec.Targets = append(spec.Targets, AliasTarget{Model: t.Model, Weight: t.Weight})
		}
		cfg.Aliases = append(cfg.Aliases, spec)
	}
	return errors.Join(errs...)
}

// finishProviders applies the environment: with no providers configured,
// one per provider key present (OPENAI_API_KEY, ANTHROPIC_API_KEY,
// GEMINI_API_KEY, or their _PARAMETER forms naming an SSM parameter), else
// the mock; <NAME>_BASE_URL overrides a base URL; keys named by variables
// are read.
func (cfg *Config) finishProviders(env Env) error {
	if len(cfg.Providers) == 0 {
		for _, t := range []string{"openai", "anthropic", "gemini"} {
			if env[EnvName(t)+"_API_KEY"] != "" || env[EnvName(t)+"_API_KEY_PARAMETER"] != "" {
				cfg.Providers = append(cfg.Providers, ProviderSpec{Name: t, Type: t})
			}
		}
		if len(cfg.Providers) == 0 {
			cfg.Providers = []ProviderSpec{{Name: "mock", Type: "mock"}}
		}
	}
	var errs []error
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		stem := EnvName(p.Name)
		if v := env[stem+"_BASE_URL"]; v != "" {
			p.BaseURL = v
		}
		if p.BaseURL == "" {
			p.BaseURL = providerTypes[p.Type]
		}
		if p.Type == "bedrock" {
			// No key: the SDK's credential chain (the function's role).
			// The endpoint is the SDK's own variable when nothing else names one.
			if p.BaseURL == "" && !strings.EqualFold(env["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"], "true") {
				p.BaseURL = env["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"]
			}
			continue
		}
		if p.BaseURL == "" && p.Type != "mock" {
			errs = append(errs, fmt.Errorf("provider %q: base_url is required for type %s (or set %s_BASE_URL)", p.Name, p.Type, stem))
		}
		if p.APIKeyEnv == "" && p.APIKeyParameter == "" && p.APIKeySecret == "" {
			// <NAME>_API_KEY_PARAMETER names an SSM parameter with the key.
			p.APIKeyParameter = env[stem+"_API_KEY_PARAMETER"]
		}
		if p.APIKeyParameter == "" && p.APIKeySecret == "" && p.Type != "mock" {
			name := p.APIKeyEnv
			if name == "" {
				name = stem + "_API_KEY"
			}
			p.APIKey = env[name]
			if p.APIKey == "" && p.Type != "compatible" {
				errs = append(errs, fmt.Errorf("provider %q: no API key: set %s (or api_key_parameter / api_key_secret)", p.Name, name))
			}
		}
	}
	return errors.Join(errs...)
}

// Warnings lists what is allowed but probably not meant: a provider rule
// or budget naming a provider that is not configured (the example's mock
// rule, once a real key replaced the mock).
func (cfg *Config) Warnings() []string {
	known := map[string]bool{}
	var names []string
	for _, p := range cfg.Providers {
		known[strings.ToLower(p.Name)] = true
		names = append(names, p.Name)
	}
	var out []string
	for _, r := range cfg.Rules {
		if r.Scope == limiter.ScopeProvider && !known[strings.ToLower(r.Subject)] {
			out = append(out, fmt.Sprintf("rule %s names provider %q, which is not configured, so it never applies (configured: %s)",
				r.ID(), r.Subject, strings.Join(names, ", ")))
		}
	}
	for _, r := range cfg.Rules {
		if r.Quota != limiter.QuotaBedrock {
			continue
		}
		name := r.Subject
		if r.Scope == limiter.ScopeModel {
			name, _, _ = strings.Cut(r.Subject, "/")
		}
		for _, p := range cfg.Providers {
			if strings.EqualFold(p.Name, name) && p.Type != "bedrock" {
				out = append(out, fmt.Sprintf("rule %s counts Bedrock's quota, but provider %q is of type %s, whose output counts once",
					r.ID(), p.Name, p.Type))
			}
		}
	}
	return out
}

// bedrockProblems checks what is Bedrock's alone: a region, burndown
// overrides and service tiers, and no API key (requests are signed with
// the SDK's credentials).
func bedrockProblems(p providerYAML, keySources int, at func(...any) string, i int) []error {
	var errs []error
	where := at("providers", i)
	if p.Type != "bedrock" {
		if p.Region != "" || len(p.Burndown) > 0 || len(p.ServiceTiers) > 0 {
			errs = append(errs, fmt.Errorf("%s: region, burndown and service_tiers are for bedrock providers", where))
		}
		return errs
	}
	if keySources > 0 {
		errs = append(errs, fmt.Errorf("%s: a bedrock provider has no API key: requests are signed with the AWS SDK's credentials (the function's role)", where))
	}
	if p.Region != "" && !regionName.MatchString(p.Region) {
		errs = append(errs, fmt.Errorf("%s: %q is not an AWS region", at("providers", i, "region"), p.Region))
	}
	for model, b := range p.Burndown {
		if b < 1 || b > limiter.MaxBurndown {
			errs = append(errs, fmt.Errorf("%s: %q: %d is outside 1..%d", at("providers", i, "burndown", model), model, b, limiter.MaxBurndown))
		}
	}
	for class, tier := range p.ServiceTiers {
		if tier != "default" && tier != "priority" && tier != "flex" {
			errs = append(errs, fmt.Errorf("%s: %q is not a service tier (default, priority or flex)", at("providers", i, "service_tiers", class), tier))
		}
	}
	return errs
}

var regionName = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d+$`)
