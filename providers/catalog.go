package providers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Target is one place a model can be served: a provider instance and the
// model id it knows the model by.
type Target struct {
	Provider Provider
	Model    string
	Weight   int // for weighted aliases; ≥ 1
}

// String returns "provider/model".
func (t Target) String() string { return t.Provider.Name() + "/" + t.Model }

// Strategy says how an alias chooses among its targets.
type Strategy uint8

const (
	// Failover tries targets in order: the first with capacity serves.
	Failover Strategy = iota + 1
	// Weighted picks targets at random in proportion to their weights,
	// skipping any without capacity.
	Weighted
)

// Route is what a model name resolves to.
type Route struct {
	Name     string // the name the client used
	Alias    bool   // a virtual model rather than a provider's own
	Strategy Strategy
	Targets  []Target
}

// Alias is a virtual model: a name clients use, served by targets.
type Alias struct {
	Name     string
	Strategy Strategy
	// Targets are "provider/model" with weights.
	Targets []AliasTarget
}

// AliasTarget is one target of an alias as configured.
type AliasTarget struct {
	Target string // "provider/model"
	Weight int
}

// Catalog knows the provider instances and virtual models, and resolves
// the model name of a request to a Route.
type Catalog struct {
	providers map[string]Provider // case-folded name
	order     []Provider
	aliases   map[string]Route // case-folded name
	aliasList []string
	fallback  Provider
	declared  map[string]Capabilities // "provider/model", lower-cased
}

// NewCatalog builds a catalog. Bare model ids that no provider lists are
// served by fallback (the first provider when fallback is nil). Every
// alias target must name a known provider.
func NewCatalog(ps []Provider, aliases []Alias, fallback Provider) (*Catalog, error) {
	c := &Catalog{providers: map[string]Provider{}, aliases: map[string]Route{}, fallback: fallback}
	var errs []error
	for _, p := range ps {
		k := strings.ToLower(p.Name())
		if _, dup := c.providers[k]; dup {
			errs = append(errs, fmt.Errorf("provider %q: defined twice", p.Name()))
			continue
		}
		c.providers[k] = p
		c.order = append(c.order, p)
	}
	if c.fallback == nil && len(c.order) > 0 {
		c.fallback = c.order[0]
	}
	for _, a := range aliases {
		k := strings.ToLower(a.Name)
		if _, dup := c.aliases[k]; dup {
			errs = append(errs, fmt.Errorf("model %q: defined twice", a.Name))
			continue
		}
		if _, clash := c.providers[k]; clash || strings.Contains(a.Name, "/") {
			errs = append(errs, fmt.Errorf("model %q: an alias name may not contain '/' or equal a provider name", a.Name))
			continue
		}
		if len(a.Targets) == 0 {
			errs = append(errs, fmt.Errorf("model %q: no targets", a.Name))
			continue
		}
		r := Route{Name: a.Name, Alias: true, Strategy: a.Strategy}
		if r.Strategy == 0 {
			r.Strategy = Failover
		}
		for i, t := range a.Targets {
			pname, model, ok := strings.Cut(t.Target, "/")
			p, known := c.providers[strings.ToLower(pname)]
			switch {
			case !ok || model == "":
				errs = append(errs, fmt.Errorf("model %q: targets[%d]: %q is not provider/model", a.Name, i, t.Target))
				continue
			case !known:
				errs = append(errs, fmt.Errorf("model %q: targets[%d]: unknown provider %q", a.Name, i, pname))
				continue
			case t.Weight < 0:
				errs = append(errs, fmt.Errorf("model %q: targets[%d]: negative weight", a.Name, i))
				continue
			}
			r.Targets = append(r.Targets, Target{Provider: p, Model: model, Weight: max(t.Weight, 1)})
		}
		c.aliases[k] = r
		c.aliasList = append(c.aliasList, a.Name)
	}
	return c, errors.Join(errs...)
}

// Provider returns the instance with the given name (case ignored).
func (c *Catalog) Provider(name string) (Provider, bool) {
	p, ok := c.providers[strings.ToLower(name)]
	return p, ok
}

// Providers returns the instances in configuration order.
func (c *Catalog) Providers() []Provider { return c.order }

// Resolve resolves a model name: an alias; "provider/model" at that
// provider; or a bare id at the provider that lists it, else the fallback.
func (c *Catalog) Resolve(model string) (Route, bool) {
	if model == "" {
		return Route{}, false
	}
	if r, ok := c.aliases[strings.ToLower(model)]; ok {
		r.Name = model
		return r, true
	}
	if pname, id, ok := strings.Cut(model, "/"); ok && id != "" {
		if p, known := c.providers[strings.ToLower(pname)]; known {
			return Route{Name: model, Strategy: Failover, Targets: []Target{{Provider: p, Model: id, Weight: 1}}}, true
		}
	}
	for _, p := range c.order {
		if l, ok := p.(ModelLister); ok && slices.Contains(l.Models(), model) {
			return Route{Name: model, Strategy: Failover, Targets: []Target{{Provider: p, Model: model, Weight: 1}}}, true
		}
	}
	if c.fallback != nil && acceptsAny(c.fallback) {
		return Route{Name: model, Strategy: Failover, Targets: []Target{{Provider: c.fallback, Model: model, Weight: 1}}}, true
	}
	return Route{}, false
}

// AnyModel is implemented by providers that serve any model id, so that a
// bare id no provider lists still resolves to them.
type AnyModel interface {
	AcceptsAnyModel() bool
}

func acceptsAny(p Provider) bool {
	a, ok := p.(AnyModel)
	return ok && a.AcceptsAnyModel()
}

// ModelIDs returns every model name a client may use: aliases, then each
// provider's listed models as "provider/model" and bare ids.
func (c *Catalog) ModelIDs() []string {
	out := slices.Clone(c.aliasList)
	seen := map[string]bool{}
	for _, id := range out {
		seen[strings.ToLower(id)] = true
	}
	for _, p := range c.order {
		l, ok := p.(ModelLister)
		if !ok {
			continue
		}
		for _, m := range l.Models() {
			for _, id := range []string{m, p.Name() + "/" + m} {
				if !seen[strings.ToLower(id)] {
					seen[strings.ToLower(id)] = true
					out = append(out, id)
				}
			}
		}
	}
	return out
}
