package adminapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/limiter"
)

// Delegated (partner) administration: a key made with admin: true on
// /partners/acme administers the subtree below it, and nothing else.
//
//   - keys: it creates keys on its path or beneath (admin keys strictly
//     beneath, so it cannot make a peer), lists those within its subtree,
//     and revokes those it could have made;
//   - rules and budgets: it creates, edits, resets and deletes user-path
//     rules strictly beneath its path (or per child of its own path),
//     never one of the configuration's, and never looser than a rule that
//     binds its own path (looser): a child's limit above its parent's
//     is a 400 naming the parent rule;
//   - pauses: it pauses user paths within its subtree and lifts pauses
//     strictly beneath it;
//   - it reads only its subtree: rules, budgets, keys, pauses, stats,
//     alerts, the audit trail and the report, filtered to it.
//
// Everything else (provider, model, tag and key rules, others' paths,
// resetting everything, explain) is 403. TestPartnerAdministration holds
// the API to this, end to end.

// mayWrite says why the principal may not write rule (moved from from, if
// set); "" when it may.
func (h *Handler) mayWrite(p principal, rule limiter.Rule, from limiter.RuleKey) string {
	if p.master {
		return ""
	}
	check := func(r limiter.Rule) string {
		switch {
		case r.Scope != limiter.ScopeUserPath:
			return "only user-path rules and budgets beneath its path, not " + r.Scope.String() + " rules"
		case !p.within(r.Subject):
			return r.ID() + " is outside its subtree"
		case !p.beneath(r.Subject) && !r.PerChild:
			return r.ID() + " binds its own path; a rule beneath it, or per child of it, is its to make"
		}
		if _, isConfig := h.config[r.Key()]; isConfig {
			return r.ID() + " comes from the configuration"
		}
		return ""
	}
	if why := check(rule); why != "" {
		return why
	}
	if from != "" && from != rule.Key() {
		src, err := limiter.ParseRuleID(string(from))
		if err == nil {
			if cur, ok := h.cfg.Limiter.Rules().Lookup(from); ok {
				src = cur
			}
			if why := check(src); why != "" {
				return why
			}
		}
	}
	return ""
}

// checkWrite answers 403 when the principal may not write rule.
func (h *Handler) checkWrite(w http.ResponseWriter, r *http.Request, rule limiter.Rule, from limiter.RuleKey) bool {
	p := principalOf(r)
	if why := h.mayWrite(p, rule, from); why != "" {
		h.forbidden(w, r, p, why)
		return false
	}
	return true
}

// looser is why rule, written by a delegated key, would be looser than a
// rule that binds the key's own path, with the parent's id; "" when it is
// not. A rule beneath a path is looser when it allows more in a window no
// longer than the parent's (a rate limit's requests or tokens, a
// concurrency limit, a bucket's capacity or refill, a budget's amount in a
// period no longer), or when its priority would lift the parent's rules
// off the paths beneath (a higher priority than theirs).
func (h *Handler) looser(p principal, rule limiter.Rule) (string, string) {
	if p.master {
		return "", ""
	}
	var binding []limiter.Rule
	maxPriority, top := 0, ""
	for _, b := range h.cfg.Limiter.Rules().List() {
		if b.Scope != limiter.ScopeUserPath || b.Key() == rule.Key() || !limiter.PathWithin(p.key.UserPath, b.Subject) {
			continue
		}
		if b.PerChild && strings.EqualFold(b.Subject, p.key.UserPath) {
			continue // counts each child of the key's path, not the path
		}
		binding = append(binding, b)
		if !isBudget(b) && (top == "" || b.Priority > maxPriority) {
			maxPriority, top = b.Priority, b.ID()
		}
	}
	for _, b := range binding {
		if field, why := above(rule, b); why != "" {
			return field + ": " + why + " of " + b.ID() + ", which binds " + p.key.UserPath +
				": a rule beneath it may not be looser than its parent's", b.ID()
		}
	}
	if !isBudget(rule) && rule.Priority > maxPriority && top != "" {
		return fmt.Sprintf("priority: %d is above the %d of %s, which binds %s: it would lift that rule off the paths beneath",
			rule.Priority, maxPriority, top, p.key.UserPath), top
	}
	return "", ""
}

// above compares a child rule with a parent of the same kind: the first
// limit of the child above the parent's, as field and why. Limits of
// different kinds are not compared.
func above(c, b limiter.Rule) (string, string) {
	switch c := c.Limit.(type) {
	case limiter.Budget:
		if b, ok := b.Limit.(limiter.Budget); ok && c.Calendar <= b.Calendar && c.MaxCost > b.MaxCost {
			return "amount_usd", "$" + limiter.FormatUSD(c.MaxCost) + " a " + c.Calendar.String() + " is above the $" +
				limiter.FormatUSD(b.MaxCost) + " a " + b.Calendar.String()
		}
	case limiter.Bucket:
		if b, ok := b.Limit.(limiter.Bucket); ok && c.Tokens == b.Tokens {
			if f, why := moreIfSet("capacity", c.Capacity, b.Capacity); why != "" {
				return f, why
			}
			if c.RefillPerSecond > b.RefillPerSecond {
				return "refill_per_second", strconv.FormatFloat(c.RefillPerSecond, 'g', -1, 64) + " is above the " +
					strconv.FormatFloat(b.RefillPerSecond, 'g', -1, 64)
			}
		}
	case limiter.Gauge:
		if b, ok := b.Limit.(limiter.Gauge); ok {
			return moreIfSet("max_requests", c.MaxInFlight, b.MaxInFlight)
		}
	case limiter.Window:
		if b, ok := b.Limit.(limiter.Window); ok && c.Period <= b.Period {
			return aboveWindow(c, b)
		}
	}
	return "", ""
}

// aboveWindow compares a child window with a parent window at least as
// long: the first of its limits above the parent's.
func aboveWindow(c, b limiter.Window) (string, string) {
	for _, d := range []struct {
		field  string
		cv, bv int64
	}{{"max_requests", c.MaxRequests, b.MaxRequests}, {"max_tokens", c.MaxTokens, b.MaxTokens},
		{"max_input_tokens", c.MaxInputTokens, b.MaxInputTokens}, {"max_output_tokens", c.MaxOutputTokens, b.MaxOutputTokens}} {
		if f, why := moreIfSet(d.field, d.cv, d.bv); why != "" {
			return f, why + " a " + limiter.PeriodName(b.Period)
		}
	}
	return "", ""
}

// moreIfSet is a limit the child sets above the parent's. A limit the
// child leaves unset is no loosening: every matching rule applies, the
// parent's too.
func moreIfSet(field string, cv, bv int64) (string, string) {
	if bv > 0 && cv > bv {
		return field, strconv.FormatInt(cv, 10) + " is above the " + strconv.FormatInt(bv, 10)
	}
	return "", ""
}

// checkLooser answers 400 naming the parent rule when rule would be
// looser than what binds the principal's path.
func (h *Handler) checkLooser(w http.ResponseWriter, r *http.Request, rule limiter.Rule) bool {
	p := principalOf(r)
	msg, parent := h.looser(p, rule)
	if msg == "" {
		return true
	}
	h.log.Info("refused: looser than what binds the delegated key's path", "key_id", p.key.ID, "rule", rule.ID(), "parent_rule", parent)
	field, why, _ := strings.Cut(msg, ": ")
	writeError(w, http.StatusBadRequest, "invalid_request_error", msg,
		map[string]any{"fields": []fieldError{{Field: field, Message: why}}, "parent_rule": parent})
	return false
}

// mayKey says why the principal may not create or revoke a key on path
// (an admin key when admin); "" when it may.
func mayKey(p principal, path string, admin bool) string {
	switch {
	case p.master:
		return ""
	case !p.within(path):
		return path + " is outside its subtree"
	case admin && !p.beneath(path):
		return "an admin key on its own path would be its peer: make it on a path beneath"
	}
	return ""
}
