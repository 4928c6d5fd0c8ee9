package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/secrets"
	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/anthropic"
	"github.com/tollgate/tollgate/providers/bedrock"
	"github.com/tollgate/tollgate/providers/gemini"
	"github.com/tollgate/tollgate/providers/mock"
	"github.com/tollgate/tollgate/providers/openai"
)

// buildCatalog builds the provider instances and virtual models,
// resolving keys kept in SSM or Secrets Manager.
func (a *App) buildCatalog(ctx context.Context) (*providers.Catalog, error) {
	specs := a.Config.Providers
	if err := a.resolveKeys(ctx, specs); err != nil {
		return nil, err
	}
	return a.catalogOf(specs)
}

// catalogOf builds the providers of specs, with the keys they hold.
func (a *App) catalogOf(specs []config.ProviderSpec) (*providers.Catalog, error) {
	var ps []providers.Provider
	var errs []error
	for _, s := range specs {
		p, err := newProvider(s, a.Config.Settings)
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %q: %w", s.Name, err))
			continue
		}
		ps = append(ps, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var aliases []providers.Alias
	for _, al := range a.Config.Aliases {
		pa := providers.Alias{Name: al.Name, Strategy: providers.Failover}
		if al.Strategy == "weighted" {
			pa.Strategy = providers.Weighted
		}
		for _, t := range al.Targets {
			pa.Targets = append(pa.Targets, providers.AliasTarget{Target: t.Model, Weight: t.Weight})
		}
		aliases = append(aliases, pa)
	}
	c, err := providers.NewCatalog(ps, aliases, nil)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		for model, caps := range s.Capabilities {
			c.Declare(s.Name, model, caps)
		}
	}
	return c, nil
}

func newProvider(s config.ProviderSpec, settings config.Settings) (providers.Provider, error) {
	switch s.Type {
	case "openai", "compatible":
		return openai.New(openai.Config{Name: s.Name, BaseURL: s.BaseURL, APIKey: s.APIKey, Models: s.Models, Timeout: s.Timeout})
	case "azure":
		return openai.New(openai.Config{Name: s.Name, BaseURL: s.BaseURL, APIKey: s.APIKey, Models: s.Models, Timeout: s.Timeout,
			Azure: &openai.Azure{APIVersion: s.APIVersion, Deployments: s.Deployments}})
	case "anthropic":
		return anthropic.New(anthropic.Config{Name: s.Name, BaseURL: s.BaseURL, APIKey: s.APIKey, Models: s.Models, Timeout: s.Timeout})
	case "gemini":
		return gemini.New(gemini.Config{Name: s.Name, BaseURL: s.BaseURL, APIKey: s.APIKey, Models: s.Models, Timeout: s.Timeout})
	case "bedrock":
		// The SDK's default credential chain, loaded on the first call.
		return bedrock.New(bedrock.Config{Name: s.Name, Region: s.Region, Endpoint: s.BaseURL, Models: s.Models, Timeout: s.Timeout,
			Burndown: s.Burndown, ServiceTiers: s.ServiceTiers})
	case "mock":
		return mock.New(s.Name, settings.MockLatency), nil
	}
	return nil, fmt.Errorf("unknown type %q", s.Type)
}

// keys returns the reader of keys kept in SSM parameters or Secrets
// Manager, made on first use and shared by the master key and the
// providers' keys.
func (a *App) keys(ctx context.Context) (*secrets.Resolver, error) {
	if a.resolver == nil {
		cfg, err := dynamostore.LoadAWSConfig(ctx, dynamostore.ClientOptions{})
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		a.resolver = secrets.New(cfg, a.secretOptions)
	}
	return a.resolver, nil
}

// resolveKeys reads the keys kept in SSM parameters or Secrets Manager.
func (a *App) resolveKeys(ctx context.Context, specs []config.ProviderSpec) error {
	var errs []error
	for i := range specs {
		s := &specs[i]
		if s.APIKeyParameter == "" && s.APIKeySecret == "" {
			continue
		}
		r, err := a.keys(ctx)
		if err != nil {
			return fmt.Errorf("provider keys: %w", err)
		}
		if s.APIKeyParameter != "" {
			s.APIKey, err = r.Parameter(ctx, s.APIKeyParameter)
		} else {
			s.APIKey, err = r.Secret(ctx, s.APIKeySecret)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %q: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}
