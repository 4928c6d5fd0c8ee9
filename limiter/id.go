package limiter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A rule's ID is the one name it has everywhere a person reads or writes
// one: the x-tollgate-rule header, /v1/usage, the admin API's lists and
// URLs, resets, logs. It is scope:subject:period, with the subject as it
// was written and the period as config writes it:
//
//	user_path:/team/alpha:minute
//	user_path:/customers/*:hour        (per_child: each child its own)
//	provider:openai:300s
//	model:openai/gpt-4o:concurrent
//	tag:feature=*:minute               (each value of the tag)
//	key:*:bucket                       (each key; token_bucket counts tokens)
//	budget:user_path:/team:day         (a budget and its calendar period)
//
// ParseRuleID reads one back to the key that identifies the rule, case
// ignored like matching.

// ID returns the rule's canonical name; see above.
func (r Rule) ID() string {
	subject := r.Subject
	if r.Scope == ScopeUserPath && r.PerChild {
		subject = strings.TrimSuffix(subject, "/") + "/" + EachKey
	}
	period := r.PeriodName()
	if b, ok := r.Limit.(Bucket); ok && b.Tokens {
		period = "token_bucket"
	}
	id := r.Scope.String() + ":" + subject + ":" + period
	if _, ok := r.Limit.(Budget); ok {
		return budgetIDPrefix + id
	}
	return id
}

const budgetIDPrefix = "budget:"

// ParseRuleID returns the identity of the rule an ID names: its scope,
// subject, per_child and period (a bucket's unit, a budget's calendar
// period), with no limits; its Key is the rule's key.
func ParseRuleID(id string) (Rule, error) {
	rest, budget := strings.CutPrefix(id, budgetIDPrefix)
	scopeName, rest, ok := strings.Cut(rest, ":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return Rule{}, fmt.Errorf("rule id %q is not scope:subject:period (user_path:/team:minute)", id)
	}
	subject, period := rest[:i], rest[i+1:]
	scope, err := ParseScope(scopeName)
	if err != nil {
		return Rule{}, fmt.Errorf("rule id %q: %w", id, err)
	}
	if subject == "" {
		return Rule{}, fmt.Errorf("rule id %q has no subject", id)
	}
	r := Rule{Scope: scope, Subject: subject}
	switch scope {
	case ScopeUserPath:
		if s, each := strings.CutSuffix(subject, "/"+EachKey); each {
			r.Subject, r.PerChild = s, true
			if r.Subject == "" {
				r.Subject = "/"
			}
		}
	case ScopeTag:
		r.PerChild = strings.HasSuffix(subject, "="+EachValue)
	case ScopeKey:
		r.PerChild = subject == EachKey
	}
	if r.Limit, err = limitOfID(period, budget); err != nil {
		return Rule{}, fmt.Errorf("rule id %q: %w", id, err)
	}
	return r, nil
}

// limitOfID is the limit, with no limits set, that an ID's period names:
// a budget's calendar period, a bucket, a gauge or a window.
func limitOfID(period string, budget bool) (Limit, error) {
	if budget {
		c, err := ParseCalendar(period)
		return Budget{Calendar: c}, err
	}
	switch period {
	case "bucket":
		return Bucket{}, nil
	case "token_bucket":
		return Bucket{Tokens: true}, nil
	case PeriodConcurrent:
		return Gauge{}, nil
	case PeriodStreams:
		return Gauge{Streams: true}, nil
	}
	p, err := ParsePeriod(period)
	if err != nil {
		n, nerr := strconv.ParseInt(strings.TrimSuffix(period, "s"), 10, 64)
		if nerr != nil || n < 1 || n > 1<<32 {
			return nil, errors.New("unknown period " + strconv.Quote(period) +
				" (want minute, hour, day, concurrent, a number of seconds like 300s, bucket or token_bucket)")
		}
		p = time.Duration(n) * time.Second
	}
	return Window{Period: p}, nil
}
