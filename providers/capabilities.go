package providers

import "strings"

// Capabilities are what a model can do, for deciding whether a request
// may go to it instead of the target it named first (a failover, a
// weighted draw, a migration, a downgrade): the context window the prompt
// and the output must fit, the largest output, and whether it takes
// tools, image input, audio input and a JSON schema for its output. A
// Feature left unknown is not assumed: a request that needs it is not
// sent to the model (configuration can declare it).
type Capabilities struct {
	// ContextWindow and MaxOutputTokens are in tokens; 0 is unknown.
	ContextWindow   int64
	MaxOutputTokens int64
	Tools           Feature
	Vision          Feature
	Audio           Feature
	// StructuredOutput is a JSON schema for the output (OpenAI's
	// response_format json_schema, Gemini's responseSchema, Anthropic's
	// output_format).
	StructuredOutput Feature
	// Regions are where the deployment serves from (configuration only:
	// the same model is deployed anywhere); none is unknown.
	Regions []string
	// Family is the model's maker ("openai", "anthropic", "google",
	// "meta", …), for a class whose fallback stays within its family.
	Family string
}

// Feature is whether a model has a capability: unknown, yes or no.
type Feature int8

const (
	FeatureUnknown Feature = iota
	FeatureYes
	FeatureNo
)

// Known reports whether the feature is known to be there.
func (f Feature) Known() bool { return f == FeatureYes }

// Over returns c with what o knows laid over it: o's known fields win.
func (c Capabilities) Over(o Capabilities) Capabilities {
	if o.ContextWindow > 0 {
		c.ContextWindow = o.ContextWindow
	}
	if o.MaxOutputTokens > 0 {
		c.MaxOutputTokens = o.MaxOutputTokens
	}
	for _, f := range []struct{ dst, src *Feature }{
		{&c.Tools, &o.Tools}, {&c.Vision, &o.Vision}, {&c.Audio, &o.Audio}, {&c.StructuredOutput, &o.StructuredOutput},
	} {
		if *f.src != FeatureUnknown {
			*f.dst = *f.src
		}
	}
	if len(o.Regions) > 0 {
		c.Regions = o.Regions
	}
	if o.Family != "" {
		c.Family = o.Family
	}
	return c
}

// CapabilitiesDate is when the built-in table was last checked against
// the providers' documentation.
const CapabilitiesDate = "2026-11"

const (
	y = FeatureYes
	n = FeatureNo
)

// builtin lists well-known model families by model-id prefix (longest
// prefix wins), as their providers document them (CapabilitiesDate):
// context window, largest output, tools, image input, audio input, a JSON
// schema for the output, regions (none built in), family.
var builtin = []struct {
	prefix string
	caps   Capabilities
}{
	{"gpt-4o-mini", Capabilities{128_000, 16_384, y, y, n, y, nil, "openai"}},
	{"gpt-4o-audio", Capabilities{128_000, 16_384, y, n, y, n, nil, "openai"}},
	{"gpt-4o", Capabilities{128_000, 16_384, y, y, n, y, nil, "openai"}},
	{"chatgpt-4o", Capabilities{128_000, 16_384, n, y, n, n, nil, "openai"}},
	{"gpt-4.1", Capabilities{1_047_576, 32_768, y, y, n, y, nil, "openai"}},
	{"gpt-4.5", Capabilities{128_000, 16_384, y, y, n, y, nil, "openai"}},
	{"gpt-4-turbo", Capabilities{128_000, 4_096, y, y, n, n, nil, "openai"}},
	{"gpt-4", Capabilities{8_192, 8_192, y, n, n, n, nil, "openai"}},
	{"gpt-3.5", Capabilities{16_385, 4_096, y, n, n, n, nil, "openai"}},
	{"gpt-5", Capabilities{400_000, 128_000, y, y, n, y, nil, "openai"}},
	{"gpt-oss", Capabilities{131_072, 131_072, y, n, n, y, nil, "openai"}},
	{"o1-mini", Capabilities{128_000, 65_536, n, n, n, n, nil, "openai"}},
	{"o1", Capabilities{200_000, 100_000, y, y, n, y, nil, "openai"}},
	{"o3", Capabilities{200_000, 100_000, y, y, n, y, nil, "openai"}},
	{"o4", Capabilities{200_000, 100_000, y, y, n, y, nil, "openai"}},
	{"claude-3-5-haiku", Capabilities{200_000, 8_192, y, n, n, n, nil, "anthropic"}},
	{"claude-3-5-sonnet", Capabilities{200_000, 8_192, y, y, n, n, nil, "anthropic"}},
	{"claude-3-7-sonnet", Capabilities{200_000, 64_000, y, y, n, n, nil, "anthropic"}},
	{"claude-3-haiku", Capabilities{200_000, 4_096, y, y, n, n, nil, "anthropic"}},
	{"claude-3-opus", Capabilities{200_000, 4_096, y, y, n, n, nil, "anthropic"}},
	{"claude-sonnet-4-5", Capabilities{200_000, 64_000, y, y, n, y, nil, "anthropic"}},
	{"claude-sonnet-4", Capabilities{200_000, 64_000, y, y, n, n, nil, "anthropic"}},
	{"claude-opus-4-1", Capabilities{200_000, 32_000, y, y, n, y, nil, "anthropic"}},
	{"claude-opus-4", Capabilities{200_000, 32_000, y, y, n, n, nil, "anthropic"}},
	{"claude-haiku-4", Capabilities{200_000, 64_000, y, y, n, n, nil, "anthropic"}},
	{"gemini-1.5", Capabilities{1_048_576, 8_192, y, y, y, y, nil, "google"}},
	{"gemini-2.0", Capabilities{1_048_576, 8_192, y, y, y, y, nil, "google"}},
	{"gemini-2.5", Capabilities{1_048_576, 65_536, y, y, y, y, nil, "google"}},
	{"gemini-3", Capabilities{1_048_576, 65_536, y, y, y, y, nil, "google"}},
	{"llama-3", Capabilities{128_000, 0, y, n, n, n, nil, "meta"}},
	{"llama3", Capabilities{128_000, 0, y, n, n, n, nil, "meta"}},
	{"llama-4", Capabilities{1_000_000, 0, y, y, n, n, nil, "meta"}},
	{"mistral-large", Capabilities{128_000, 0, y, n, n, y, nil, "mistral"}},
	{"nova-pro", Capabilities{300_000, 10_000, y, y, n, n, nil, "amazon"}},
	{"nova-lite", Capabilities{300_000, 10_000, y, y, n, n, nil, "amazon"}},
	{"nova-micro", Capabilities{128_000, 10_000, y, n, n, n, nil, "amazon"}},
}

// builtinByFirst indexes builtin by the first byte of each prefix.
var builtinByFirst = func() (by [256][]int) {
	for i, e := range builtin {
		by[e.prefix[0]] = append(by[e.prefix[0]], i)
	}
	return by
}()

// BuiltinCapabilities returns what the built-in table knows of a model,
// and whether it knows it at all (see BaseModelID for the ids it reads).
func BuiltinCapabilities(model string) (Capabilities, bool) {
	m := BaseModelID(model)
	if m == "" {
		return Capabilities{}, false
	}
	best := -1
	for _, i := range builtinByFirst[m[0]] { // the entries whose prefix m could start with
		if p := builtin[i].prefix; strings.HasPrefix(m, p) && (best < 0 || len(p) > len(builtin[best].prefix)) {
			best = i
		}
	}
	if best < 0 {
		return Capabilities{}, false
	}
	return builtin[best].caps, true
}

// Declare records what configuration declares of a provider's model
// (providers[].models objects), laid over the built-in table. It is for
// building a catalog, before it serves.
func (c *Catalog) Declare(provider, model string, caps Capabilities) {
	if c.declared == nil {
		c.declared = map[string]Capabilities{}
	}
	c.declared[strings.ToLower(provider)+"/"+strings.ToLower(model)] = caps
}

// Capabilities returns what is known of target t's model: the built-in
// table, with what configuration declares laid over it.
func (c *Catalog) Capabilities(t Target) Capabilities {
	return DeclaredCapabilities(t.Model, c.declared[strings.ToLower(t.Provider.Name())+"/"+strings.ToLower(t.Model)])
}

// DeclaredCapabilities returns what is known of model: the built-in
// table, with what configuration declares of it (zero: nothing) laid
// over it.
func DeclaredCapabilities(model string, declared Capabilities) Capabilities {
	caps, _ := BuiltinCapabilities(model)
	return caps.Over(declared)
}
