package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/providers"
)

// modelYAML is one entry of providers[].models: a model id, or an object
// with its id and what the model can do, laid over the built-in table of
// capabilities (providers.BuiltinCapabilities).
type modelYAML struct {
	ID               string   `yaml:"id"`
	ContextWindow    int64    `yaml:"context_window"`
	MaxOutputTokens  int64    `yaml:"max_output_tokens"`
	Tools            *bool    `yaml:"tools"`
	Vision           *bool    `yaml:"vision"`
	Audio            *bool    `yaml:"audio"`
	StructuredOutput *bool    `yaml:"structured_output"`
	Regions          []string `yaml:"regions"`
	Family           string   `yaml:"family"`
	declared         bool     // an object, not an id alone
}

// UnmarshalYAML reads an id alone or an object.
func (m *modelYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&m.ID)
	}
	type plain modelYAML
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*m = modelYAML(p)
	m.declared = true
	return nil
}

func feature(b *bool) providers.Feature {
	switch {
	case b == nil:
		return providers.FeatureUnknown
	case *b:
		return providers.FeatureYes
	}
	return providers.FeatureNo
}

// loadModels reads a provider's models: their ids, and the capabilities
// the objects among them declare.
func loadModels(spec *ProviderSpec, models []modelYAML, at func(...any) string, i int) []error {
	var errs []error
	for j, m := range models {
		where := at("providers", i, "models", j)
		switch {
		case strings.TrimSpace(m.ID) == "":
			errs = append(errs, fmt.Errorf("%s: id is missing", where))
			continue
		case m.ContextWindow < 0 || m.ContextWindow > maxContextWindow:
			errs = append(errs, fmt.Errorf("%s: context_window %d is not from 1 to %d tokens", where, m.ContextWindow, maxContextWindow))
		case m.MaxOutputTokens < 0 || m.MaxOutputTokens > maxRequestTokens:
			errs = append(errs, fmt.Errorf("%s: max_output_tokens %d is not from 1 to %d", where, m.MaxOutputTokens, maxRequestTokens))
		case m.ContextWindow > 0 && m.MaxOutputTokens > m.ContextWindow:
			errs = append(errs, fmt.Errorf("%s: max_output_tokens %d is larger than the context window %d", where, m.MaxOutputTokens, m.ContextWindow))
		}
		if slices.ContainsFunc(m.Regions, func(r string) bool { return strings.TrimSpace(r) == "" || strings.ContainsAny(r, " ,") }) {
			errs = append(errs, fmt.Errorf("%s: regions are names without spaces or commas (eu, eu-west-1)", where))
		}
		spec.Models = append(spec.Models, m.ID)
		if !m.declared {
			continue
		}
		if spec.Capabilities == nil {
			spec.Capabilities = map[string]providers.Capabilities{}
		}
		spec.Capabilities[m.ID] = providers.Capabilities{
			ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens,
			Tools: feature(m.Tools), Vision: feature(m.Vision), Audio: feature(m.Audio), StructuredOutput: feature(m.StructuredOutput),
			Regions: m.Regions, Family: strings.ToLower(m.Family),
		}
	}
	return errs
}

// maxContextWindow bounds a declared context window (ten million tokens).
const maxContextWindow = 10_000_000

// DowngradeSpec is one downgrade rule (downgrade[]): a request of one of
// Classes that From would refuse (Refused), or whose tightest budget at
// From is below BudgetBelow of its limit, goes to To instead.
type DowngradeSpec struct {
	From, To    string
	Refused     bool
	BudgetBelow float64
	Classes     []string
}

type downgradeYAML struct {
	From string `yaml:"from"`
	To   string `yaml:"to"`
	When struct {
		BudgetBelow float64 `yaml:"budget_below"`
		Refused     bool    `yaml:"refused"`
	} `yaml:"when"`
	Classes []string `yaml:"classes"`
}

// loadDowngrades reads the downgrade section; classes are checked once
// the shaping section is read.
func (cfg *Config) loadDowngrades(specs []downgradeYAML, at func(...any) string) error {
	var errs []error
	for i, d := range specs {
		where := at("downgrade", i)
		for _, f := range []struct{ name, v string }{{"from", d.From}, {"to", d.To}} {
			if p, m, ok := strings.Cut(f.v, "/"); !ok || p == "" || m == "" {
				errs = append(errs, fmt.Errorf("%s.%s: %q is not provider/model", where, f.name, f.v))
			}
		}
		if strings.EqualFold(d.From, d.To) {
			errs = append(errs, fmt.Errorf("%s: from and to are the same model", where))
		}
		if d.When.BudgetBelow < 0 || d.When.BudgetBelow >= 1 {
			errs = append(errs, fmt.Errorf("%s.when.budget_below: %v is not a fraction from 0 to 1", where, d.When.BudgetBelow))
		}
		if !d.When.Refused && d.When.BudgetBelow == 0 {
			errs = append(errs, fmt.Errorf("%s.when: give refused: true, budget_below, or both", where))
		}
		if len(d.Classes) == 0 {
			errs = append(errs, fmt.Errorf("%s.classes: name the classes that opt in (a downgrade changes the model a request gets)", where))
		}
		cfg.Downgrades = append(cfg.Downgrades, DowngradeSpec{From: d.From, To: d.To, Refused: d.When.Refused,
			BudgetBelow: d.When.BudgetBelow, Classes: d.Classes})
	}
	return errors.Join(errs...)
}

// checkDowngrades checks what needs the rest of the configuration: the
// classes, and the providers the models name.
func (cfg *Config) checkDowngrades(at func(...any) string) error {
	var errs []error
	for i, d := range cfg.Downgrades {
		for _, c := range d.Classes {
			if _, ok := cfg.Shaping.Classes[c]; !ok {
				errs = append(errs, fmt.Errorf("%s: %q is not a class", at("downgrade", i, "classes"), c))
			}
		}
		for _, m := range []string{d.From, d.To} {
			p, _, _ := strings.Cut(m, "/")
			if len(cfg.Providers) > 0 && !slices.ContainsFunc(cfg.Providers, func(s ProviderSpec) bool { return strings.EqualFold(s.Name, p) }) {
				errs = append(errs, fmt.Errorf("%s: %q names no provider", at("downgrade", i), m))
			}
		}
	}
	return errors.Join(errs...)
}
