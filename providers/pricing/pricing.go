// Package pricing says what a model's tokens cost, for budgets: a dated
// built-in table of well-known models' list prices, which configuration
// overrides, and for a model neither knows the configured default or else
// the highest price known. A model is never free.
package pricing

import (
	"cmp"
	"slices"
	"strings"

	"github.com/tollgate/tollgate/limiter"
)

// BuiltinDate is when the built-in table was taken from the providers'
// published price lists. Prices change: configure `prices` for what your
// contract says.
const BuiltinDate = "2025-10-01"

// usd builds a price from dollars per million tokens.
func usd(input, output, cached float64) limiter.Price {
	m := func(v float64) int64 { return int64(v*1_000_000 + 0.5) }
	return limiter.Price{Input: m(input), Output: m(output), CachedInput: m(cached)}
}

// builtin lists standard (not batch, not long-context) list prices by
// model-id prefix, in USD per million tokens: input, output, cached input.
// The longest matching prefix wins, so "gpt-4o-mini-2024-07-18" is
// gpt-4o-mini and "gpt-4o-2024-08-06" is gpt-4o.
var builtin = map[string]limiter.Price{
	// OpenAI
	"gpt-5":                  usd(1.25, 10, 0.125),
	"gpt-5-mini":             usd(0.25, 2, 0.025),
	"gpt-5-nano":             usd(0.05, 0.40, 0.005),
	"gpt-4.1":                usd(2, 8, 0.50),
	"gpt-4.1-mini":           usd(0.40, 1.60, 0.10),
	"gpt-4.1-nano":           usd(0.10, 0.40, 0.025),
	"gpt-4o":                 usd(2.50, 10, 1.25),
	"gpt-4o-mini":            usd(0.15, 0.60, 0.075),
	"chatgpt-4o":             usd(5, 15, 5),
	"gpt-4-turbo":            usd(10, 30, 10),
	"gpt-4":                  usd(30, 60, 30),
	"gpt-3.5-turbo":          usd(0.50, 1.50, 0.50),
	"o1":                     usd(15, 60, 7.50),
	"o1-mini":                usd(1.10, 4.40, 0.55),
	"o3":                     usd(2, 8, 0.50),
	"o3-mini":                usd(1.10, 4.40, 0.55),
	"o4-mini":                usd(1.10, 4.40, 0.275),
	"text-embedding-3-small": usd(0.02, 0, 0.02),
	"text-embedding-3-large": usd(0.13, 0, 0.13),
	"text-embedding-ada-002": usd(0.10, 0, 0.10),
	// Anthropic (cached input: cache reads)
	"claude-opus-4-5":   usd(5, 25, 0.50),
	"claude-opus-4":     usd(15, 75, 1.50),
	"claude-sonnet-4":   usd(3, 15, 0.30),
	"claude-3-7-sonnet": usd(3, 15, 0.30),
	"claude-3-5-sonnet": usd(3, 15, 0.30),
	"claude-haiku-4-5":  usd(1, 5, 0.10),
	"claude-3-5-haiku":  usd(0.80, 4, 0.08),
	"claude-3-opus":     usd(15, 75, 1.50),
	"claude-3-haiku":    usd(0.25, 1.25, 0.03),
	// Gemini (prompts up to 200k tokens)
	"gemini-2.5-pro":        usd(1.25, 10, 0.31),
	"gemini-2.5-flash":      usd(0.30, 2.50, 0.075),
	"gemini-2.5-flash-lite": usd(0.10, 0.40, 0.025),
	"gemini-2.0-flash":      usd(0.10, 0.40, 0.025),
	"gemini-2.0-flash-lite": usd(0.075, 0.30, 0.075),
	"gemini-1.5-pro":        usd(1.25, 5, 0.3125),
	"gemini-1.5-flash":      usd(0.075, 0.30, 0.01875),
	"gemini-embedding-001":  usd(0.15, 0, 0.15),
	"text-embedding-004":    usd(0.10, 0, 0.10),
}

// Source says where a price came from.
type Source string

const (
	FromConfig  Source = "config"
	FromBuiltin Source = "builtin"
	FromDefault Source = "default"
	FromHighest Source = "highest" // no price known: the highest of all
)

// Table resolves prices. Its zero value is not usable; call New.
type Table struct {
	config  map[string]limiter.Price // case-folded "model" or "provider/model"
	def     *limiter.Price
	highest limiter.Price
	prefix  []string // built-in prefixes, longest first
}

// New returns a table with config's prices (keyed "model" or
// "provider/model", where provider is an instance name) over the built-in
// ones, and def, if not nil, for models neither knows.
func New(config map[string]limiter.Price, def *limiter.Price) *Table {
	t := &Table{config: make(map[string]limiter.Price, len(config)), def: def}
	for k, p := range config {
		t.config[strings.ToLower(k)] = p
	}
	for k, p := range builtin {
		t.prefix = append(t.prefix, k)
		t.raise(p)
	}
	for _, p := range t.config {
		t.raise(p)
	}
	slices.SortFunc(t.prefix, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	return t
}

func (t *Table) raise(p limiter.Price) {
	t.highest.Input = max(t.highest.Input, p.Input)
	t.highest.Output = max(t.highest.Output, p.Output)
	t.highest.CachedInput = max(t.highest.CachedInput, p.CachedInput)
}

// Lookup returns the price of model at the provider instance: the
// configured "provider/model", then the configured "model", then the
// built-in table (by longest prefix), then the configured default, then
// the highest price known in each dimension.
func (t *Table) Lookup(provider, model string) (limiter.Price, Source) {
	m := strings.ToLower(model)
	if p, ok := t.config[strings.ToLower(provider)+"/"+m]; ok {
		return p, FromConfig
	}
	if p, ok := t.config[m]; ok {
		return p, FromConfig
	}
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:] // "openai/gpt-4o" through a compatible server
	}
	for _, k := range t.prefix {
		if strings.HasPrefix(m, k) {
			return builtin[k], FromBuiltin
		}
	}
	if t.def != nil {
		return *t.def, FromDefault
	}
	return t.highest, FromHighest
}

// Batch returns a batch's price from a list price: OpenAI's, Anthropic's
// and Gemini's batch APIs all charge half, here rounded up.
func Batch(p limiter.Price) limiter.Price {
	half := func(v int64) int64 { return (v + 1) / 2 }
	return limiter.Price{Input: half(p.Input), Output: half(p.Output), CachedInput: half(p.CachedInput)}
}
