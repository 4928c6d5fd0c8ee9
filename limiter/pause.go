package limiter

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// A Pause is the emergency brake: every request in its scope is refused,
// with its reason, until it is lifted or its Until passes. A pause on a
// provider or a model is a target to route around; one on a user path, a
// tag or a key refuses outright.
type Pause struct {
	Scope   Scope
	Subject string    // as for rules: "/team", "openai", "openai/gpt-4o", "env=prod" or "env", a key id or "*"
	Until   time.Time // zero: until lifted
	Reason  string
	Since   time.Time
}

// MaxPauseReason bounds a pause's reason, which every refused client reads.
const MaxPauseReason = 500

// Key names the pause's subject: one pause per scope and subject.
func (p Pause) Key() string { return p.Scope.String() + ":" + strings.ToLower(p.Subject) }

// ID is the pause as headers and logs name it: "pause:user_path:/team".
func (p Pause) ID() string { return "pause:" + p.Scope.String() + ":" + p.Subject }

// Consumer reports whether the pause is on who sends (a user path, tag or
// key), which no other target can help, rather than on where it goes.
func (p Pause) Consumer() bool { return consumerScope(p.Scope) }

func consumerScope(s Scope) bool { return s == ScopeUserPath || s == ScopeTag || s == ScopeKey }

// Active reports whether the pause holds at now.
func (p Pause) Active(now time.Time) bool { return p.Until.IsZero() || now.Before(p.Until) }

// Problems lists what is wrong with a pause, "field: why".
func (p Pause) Problems() []error {
	var errs []error
	switch p.Scope {
	case ScopeUserPath:
		if _, err := ParseUserPath(p.Subject); err != nil {
			errs = append(errs, fmt.Errorf("user_path: %w", err))
		}
	case ScopeProvider, ScopeModel, ScopeKey:
		if strings.TrimSpace(p.Subject) == "" || strings.ContainsAny(p.Subject, " \t\n") {
			errs = append(errs, fmt.Errorf("subject: %q is not a %s", p.Subject, p.Scope))
		}
	case ScopeTag:
		name, value, hasValue := strings.Cut(p.Subject, "=")
		if err := checkTagPart("tag", name); err != nil {
			errs = append(errs, err)
		}
		if hasValue && value != EachValue {
			if err := checkTagPart("value", value); err != nil {
				errs = append(errs, err)
			}
		}
	default:
		errs = append(errs, errors.New("scope: required (user_path, provider, model, tag or key)"))
	}
	if len(p.Reason) > MaxPauseReason {
		errs = append(errs, fmt.Errorf("reason: longer than %d bytes", MaxPauseReason))
	}
	return errs
}

// Matches reports whether the pause applies to a request of s, matched as
// rules are: a user path and everything below it, a provider, a model at a
// provider ("provider/model") or anywhere (a bare id), a tag's value or
// any value ("env", "env=*"), a key's id or any managed key ("*").
func (p Pause) Matches(s Subject) bool {
	switch p.Scope {
	case ScopeUserPath:
		return PathWithin(s.UserPath, p.Subject)
	case ScopeProvider:
		return s.Provider != "" && strings.EqualFold(p.Subject, s.Provider)
	case ScopeModel:
		if s.Model == "" {
			return false
		}
		if prov, model, ok := strings.Cut(p.Subject, "/"); ok && strings.EqualFold(prov, s.Provider) && strings.EqualFold(model, s.Model) {
			return true
		}
		return strings.EqualFold(p.Subject, s.Model)
	case ScopeTag:
		name, value, _ := strings.Cut(p.Subject, "=")
		for _, t := range s.Tags {
			if strings.EqualFold(t.Name, name) && (value == "" || value == EachValue || strings.EqualFold(t.Value, value)) {
				return true
			}
		}
	case ScopeKey:
		return s.Key != "" && (p.Subject == EachKey || strings.EqualFold(p.Subject, s.Key))
	}
	return false
}

// Paused returns the first pause in ps that holds for s at now: one on
// the consumer first, since it refuses whatever the target.
func Paused(ps []Pause, now time.Time, s Subject) (Pause, bool) {
	var found *Pause
	for i := range ps {
		p := &ps[i]
		if !p.Active(now) || !p.Matches(s) {
			continue
		}
		if p.Consumer() {
			return *p, true
		}
		if found == nil {
			found = p
		}
	}
	if found == nil {
		return Pause{}, false
	}
	return *found, true
}
