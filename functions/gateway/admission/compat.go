package admission

import (
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/providers"
)

// A request may go to a target other than its first choice (the next of
// a failover, the rest of a weighted draw, a migration's or a downgrade's
// model) only when that target can do what the request needs: its
// prompt estimate and output reservation fit the context window, it takes
// the tools, images, audio and output schema the request sends, and the
// request's class allows falling back to it at all. A caller with a
// residency tag goes only to targets in those regions, first choice
// included. An incompatible target is skipped with its reason; when no
// compatible one is left, the request waits or is answered with the first
// choice's refusal and every reason (no_compatible_target), never sent
// somewhere that silently changes what it asked for.

// Needs are what a request needs of a model, as its body says.
type Needs struct {
	Tools, Vision, Audio, StructuredOutput bool
}

// Fallback is a traffic class's policy for targets other than a
// request's first choice.
type Fallback int8

const (
	// FallbackAny lets a request go to any compatible target (the default).
	FallbackAny Fallback = iota
	// FallbackSameFamily keeps it to models of its first choice's family
	// (maker).
	FallbackSameFamily
	// FallbackNone keeps it to its first choice.
	FallbackNone
)

// ParseFallback reads a class's fallback: any, same_family or none.
func ParseFallback(s string) (Fallback, bool) {
	switch s {
	case "", "any":
		return FallbackAny, true
	case "same_family":
		return FallbackSameFamily, true
	case "none":
		return FallbackNone, true
	}
	return 0, false
}

func (f Fallback) String() string {
	switch f {
	case FallbackSameFamily:
		return "same_family"
	case FallbackNone:
		return "none"
	}
	return "any"
}

// ResidencyTag is the tag (on the request or its key) naming the regions
// a request may be served from: residency=eu.
const ResidencyTag = "residency"

// residency is the caller's residency, "" for none.
func (r *Request) residency() string {
	for _, t := range r.Caller.Tags {
		if strings.EqualFold(t.Name, ResidencyTag) {
			return strings.ToLower(t.Value)
		}
	}
	return ""
}

// needs is what the request needs, asked of its body once.
func (a *Admission) needs() Needs {
	if !a.needsRead {
		a.needsRead = true
		if a.req.Body != nil {
			a.need = a.req.Body.Needs()
		}
	}
	return a.need
}

// incompatibility says why target t may not take the request in place
// of first (its first choice), "" when it may; out is the output it
// would reserve at t.
func (a *Admission) incompatibility(t, first providers.Target, out int64) string {
	caps := a.o.cfg.Catalog.Capabilities(t)
	if why := residencyMismatch(a.req.residency(), caps); why != "" {
		return why
	}
	if t == first {
		return ""
	}
	switch a.o.cfg.Fallbacks[a.req.Caller.Class] {
	case FallbackNone:
		return "the class " + a.req.Caller.Class + " does not fall back from " + first.String()
	case FallbackSameFamily:
		want := a.o.cfg.Catalog.Capabilities(first).Family
		if want == "" || caps.Family != want {
			return "the class " + a.req.Caller.Class + " falls back within the family of " + first.String() + " (" +
				orUnknown(want) + "); this is " + orUnknown(caps.Family)
		}
	}
	if w := caps.ContextWindow; w > 0 && a.req.InputTokens > w-min(out, w) {
		return "the prompt (" + tokens(a.req.InputTokens) + ") and the output reservation (" + tokens(out) +
			") exceed its context window (" + tokens(w) + ")"
	}
	n := a.needs()
	for _, f := range []struct {
		need bool
		has  providers.Feature
		what string
		key  string
	}{
		{n.Tools, caps.Tools, "tools", "tools"},
		{n.Vision, caps.Vision, "image input", "vision"},
		{n.Audio, caps.Audio, "audio input", "audio"},
		{n.StructuredOutput, caps.StructuredOutput, "a JSON schema for its output", "structured_output"},
	} {
		switch {
		case !f.need || f.has == providers.FeatureYes:
		case f.has == providers.FeatureNo:
			return "it does not take " + f.what
		default:
			return "it is not known to take " + f.what + " (declare " + f.key + ": true on the provider's model)"
		}
	}
	return ""
}

// residencyMismatch says why a model of caps may not serve a caller of
// residency ("" for none): its regions are unknown, or none is within it
// (eu covers eu and eu-west-1).
func residencyMismatch(residency string, caps providers.Capabilities) string {
	if residency == "" {
		return ""
	}
	if len(caps.Regions) == 0 {
		return "the caller's residency is " + residency + " and its regions are unknown (declare regions on the provider's model)"
	}
	for _, r := range caps.Regions {
		r = strings.ToLower(r)
		if r == residency || strings.HasPrefix(r, residency+"-") {
			return ""
		}
	}
	return "the caller's residency is " + residency + " and it serves " + strings.Join(caps.Regions, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func tokens(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s + " tokens"
}
