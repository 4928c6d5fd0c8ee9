package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/limiter"
)

var errEOF = io.EOF

const (
	userPathPrefix = "SET_RATE_LIMIT_"
	providerPrefix = "SET_PROVIDER_RATE_LIMIT_"
)

// rulesFromEnv reads SET_RATE_LIMIT_<PATH> and SET_PROVIDER_RATE_LIMIT_<NAME>.
//
// The path suffix is case-folded, "__" separates segments and a single "_"
// stands for "-": SET_RATE_LIMIT_TEAM__ALPHA is /team/alpha,
// SET_RATE_LIMIT_DATA_SCIENCE is /data-science, and SET_RATE_LIMIT_ (empty
// suffix) is /. A provider name is case-folded with "_" standing for "-".
func rulesFromEnv(env Env) ([]limiter.Rule, error) {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names) // stable order for rules and messages
	var rules []limiter.Rule
	var errs []error
	for _, name := range names {
		value := env[name]
		var scope limiter.Scope
		var subject string
		switch {
		case strings.HasPrefix(name, providerPrefix):
			scope = limiter.ScopeProvider
			subject = strings.ReplaceAll(strings.ToLower(name[len(providerPrefix):]), "_", "-")
			if subject == "" {
				errs = append(errs, fmt.Errorf("%s: no provider name after the prefix", name))
				continue
			}
		case strings.HasPrefix(name, userPathPrefix):
			scope = limiter.ScopeUserPath
			subject = envPath(name[len(userPathPrefix):])
		default:
			continue
		}
		rs, err := parseLimits(scope, subject, value)
		if err != nil {
			errs = append(errs, prefix(name, err))
			continue
		}
		rules = append(rules, rs...)
	}
	return rules, errors.Join(errs...)
}

func envPath(suffix string) string {
	if suffix == "" {
		return "/"
	}
	segs := strings.Split(strings.ToLower(suffix), "__")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(s, "_", "-")
	}
	return "/" + strings.Join(segs, "/")
}

// compactKeys maps the compact form's keys to the limit they set (a
// window of a period, or the gauge) and whether they set its tokens.
var compactKeys = map[string]struct {
	limit  limiter.Limit
	tokens bool
}{
	"rpm":        {limiter.Window{Period: limiter.Minute}, false},
	"tpm":        {limiter.Window{Period: limiter.Minute}, true},
	"rph":        {limiter.Window{Period: limiter.Hour}, false},
	"tph":        {limiter.Window{Period: limiter.Hour}, true},
	"rpd":        {limiter.Window{Period: limiter.Day}, false},
	"tpd":        {limiter.Window{Period: limiter.Day}, true},
	"concurrent": {limiter.Gauge{}, false},
}

// withCompact is l with the limit of a compact key set to n: the
// window's tokens or requests, or the gauge's requests in flight.
func withCompact(l limiter.Limit, tokens bool, n int64) limiter.Limit {
	switch l := l.(type) {
	case limiter.Window:
		if tokens {
			l.MaxTokens = n
		} else {
			l.MaxRequests = n
		}
		return l
	case limiter.Gauge:
		l.MaxInFlight = n
		return l
	}
	return l
}

// parseLimits reads one variable's value: the compact form
// "rpm=100,tpm=50000,concurrent=10" or a JSON array of limit objects.
func parseLimits(scope limiter.Scope, subject, value string) ([]limiter.Rule, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, errors.New("empty value (want rpm=…,tpm=… or a JSON array)")
	}
	if value[0] == '[' {
		return parseJSONLimits(scope, subject, value)
	}
	var rules []limiter.Rule
	var errs []error
	byPeriod := map[limiter.Limit]int{} // the key's limit, with none set → its rule
	seen := map[string]bool{}
	for item := range strings.SplitSeq(value, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		k = strings.ToLower(strings.TrimSpace(k))
		spec, known := compactKeys[k]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%q: want key=value", item))
			continue
		case !known:
			errs = append(errs, fmt.Errorf("%q: unknown key %q (want rpm, tpm, rph, tph, rpd, tpd or concurrent)", item, k))
			continue
		case seen[k]:
			errs = append(errs, fmt.Errorf("%q: %s given twice", item, k))
			continue
		}
		seen[k] = true
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a whole number", k, v))
			continue
		}
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s: negative limit %d", k, n))
			continue
		}
		i, ok := byPeriod[spec.limit]
		if !ok {
			i = len(rules)
			byPeriod[spec.limit] = i
			rules = append(rules, limiter.Rule{Scope: scope, Subject: subject, Limit: spec.limit, Source: limiter.SourceConfig})
		}
		rules[i].Limit = withCompact(rules[i].Limit, spec.tokens, n)
	}
	for _, r := range rules {
		errs = append(errs, r.Validate())
	}
	return rules, errors.Join(errs...)
}

func parseJSONLimits(scope limiter.Scope, subject, value string) ([]limiter.Rule, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var specs []limitSpec
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("JSON: trailing data after the array")
	}
	if len(specs) == 0 {
		return nil, errors.New("JSON: empty array")
	}
	var rules []limiter.Rule
	var errs []error
	for i, s := range specs {
		if scope != limiter.ScopeUserPath && s.PerChild {
			errs = append(errs, fmt.Errorf("[%d]: per_child: only user_path rules can be per child", i))
			continue
		}
		r, err := s.rule(scope, subject)
		if err != nil {
			errs = append(errs, prefix(fmt.Sprintf("[%d]", i), err))
			continue
		}
		rules = append(rules, r)
	}
	return rules, errors.Join(errs...)
}
