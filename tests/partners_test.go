package tests

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// partnerConfig binds /partners/acme: 100 requests a minute, 5 in
// flight, $50 a day; and has a configuration rule inside its subtree.
const partnerConfig = `
rate_limits:
  user_paths:
    - path: /partners/acme
      limits:
        - {period: minute, max_requests: 100, max_tokens: 100000}
        - {period: concurrent, max_requests: 5}
    - path: /partners/acme/legacy
      limits: [{period: minute, max_requests: 10}]
budgets:
  user_paths:
    - {path: /partners/acme, amount_usd: 50, period: day}
`

// madeKey is POST /admin/keys's answer.
type madeKey struct {
	ID       string `json:"id"`
	Key      string `json:"key"`
	UserPath string `json:"user_path"`
	Admin    bool   `json:"admin"`
}

func makeKey(t *testing.T, in *instance, key, body string) madeKey {
	t.Helper()
	s, b := in.call(t, "POST", "/admin/keys", key, body)
	var k madeKey
	if s != 201 || json.Unmarshal(b, &k) != nil || k.Key == "" {
		t.Fatalf("POST /admin/keys %s: %d %s", body, s, b)
	}
	return k
}

// A partner key on /partners/acme administers its subtree: it makes a
// key for /partners/acme/shop, a rule and a budget beneath it, which work
// through the gateway; it is refused (403) on /partners/other, on a
// configuration rule, on provider rules and on the master's routes, and
// (400, naming the parent) on a rule looser than what binds its path;
// once revoked it administers nothing, while the keys it made still work.
// Every applied write is in the audit trail with who made it and the
// target before and after; the refused ones are not.
func TestPartnerAdministration(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, partnerConfig)})
	partner := makeKey(t, in, master, `{"user_path":"/partners/acme","admin":true,"name":"acme"}`)
	if !partner.Admin {
		t.Fatalf("the partner key is not an admin key: %+v", partner)
	}
	expect := func(what string, want int, method, path, key, body string) []byte {
		t.Helper()
		s, b := in.call(t, method, path, key, body)
		if s != want {
			t.Fatalf("%s: %s %s: %d %s, want %d", what, method, path, s, b, want)
		}
		return b
	}
	// Who it is.
	var who struct {
		Actor     string `json:"actor"`
		UserPath  string `json:"user_path"`
		Delegated bool   `json:"delegated"`
	}
	_ = json.Unmarshal(expect("whoami", 200, "GET", "/admin/whoami", partner.Key, ""), &who)
	if who.Actor != partner.ID || who.UserPath != "/partners/acme" || !who.Delegated {
		t.Fatalf("whoami %+v", who)
	}

	// What it may do.
	shop := makeKey(t, in, partner.Key, `{"user_path":"/partners/acme/shop","name":"shop"}`)
	sub := makeKey(t, in, partner.Key, `{"user_path":"/partners/acme/resellers/r1","admin":true}`)
	expect("a rule beneath", 201, "POST", "/admin/rate-limits", partner.Key, `{"user_path":"/partners/acme/shop","limit_key":{"period":"minute"},"max_requests":50}`)
	expect("a budget beneath", 201, "POST", "/admin/budgets", partner.Key, `{"user_path":"/partners/acme/shop","period":"day","amount_usd":"10"}`)
	expect("a per-child rule of its own path", 201, "PUT", "/admin/rate-limits", partner.Key, `{"user_path":"/partners/acme","per_child":true,"limit_key":{"period":"hour"},"max_requests":1000}`)
	expect("an edit", 200, "PATCH", "/admin/rate-limits/user_path:/partners/acme/shop:minute", partner.Key, `{"max_requests":40}`)
	expect("a pause within", 201, "POST", "/admin/pause", partner.Key, `{"user_path":"/partners/acme/shop/beta","for":"1h","reason":"testing"}`)
	expect("lifting it", 200, "DELETE", "/admin/pause", partner.Key, `{"user_path":"/partners/acme/shop/beta"}`)
	expect("revoking a key it made", 200, "DELETE", "/admin/keys/"+sub.ID, partner.Key, "")

	// What it may not.
	for _, c := range []struct{ what, method, path, body string }{
		{"a rule on another partner's path", "POST", "/admin/rate-limits", `{"user_path":"/partners/other","limit_key":{"period":"minute"},"max_requests":5}`},
		{"a budget on another partner's path", "POST", "/admin/budgets", `{"user_path":"/partners/other","period":"day","amount_usd":"1"}`},
		{"a key on another partner's path", "POST", "/admin/keys", `{"user_path":"/partners/other"}`},
		{"an admin key on its own path", "POST", "/admin/keys", `{"user_path":"/partners/acme","admin":true}`},
		{"a rule on its own path", "PUT", "/admin/rate-limits", `{"user_path":"/partners/acme","limit_key":{"period":"minute"},"max_requests":1000}`},
		{"editing a configuration rule", "PATCH", "/admin/rate-limits/user_path:/partners/acme/legacy:minute", `{"max_requests":5}`},
		{"deleting a configuration rule", "DELETE", "/admin/rate-limits/user_path:/partners/acme/legacy:minute", ""},
		{"resetting what binds it", "POST", "/admin/rate-limits/reset-one", `{"user_path":"/partners/acme","limit_key":{"period":"minute"}}`},
		{"a provider rule", "POST", "/admin/rate-limits", `{"scope":"provider","subject":"mock","limit_key":{"period":"minute"},"max_requests":5}`},
		{"a model rule", "POST", "/admin/rate-limits", `{"scope":"model","subject":"gpt-4o","limit_key":{"period":"minute"},"max_requests":5}`},
		{"resetting everything", "POST", "/admin/rate-limits/reset", `{"confirmation":"reset"}`},
		{"explain", "POST", "/admin/explain", `{"user_path":"/partners/acme/shop","model":"gpt-4o"}`},
		{"a pause outside", "POST", "/admin/pause", `{"user_path":"/partners/other","reason":"x"}`},
		{"a provider pause", "POST", "/admin/pause", `{"provider":"mock","reason":"x"}`},
		{"lifting the pause of its own path", "DELETE", "/admin/pause", `{"user_path":"/partners/acme"}`},
		{"another partner's rule", "GET", "/admin/rate-limits/user_path:/partners/other:minute", ""},
	} {
		s, b := in.call(t, c.method, c.path, partner.Key, c.body)
		if s != 403 {
			t.Errorf("%s: %d %s, want 403", c.what, s, b)
		}
	}
	// Looser than its parent: 400 naming the parent rule.
	for _, c := range []struct{ what, path, body, parent string }{
		{"more requests a minute", "/admin/rate-limits", `{"user_path":"/partners/acme/shop2","limit_key":{"period":"minute"},"max_requests":200}`, "user_path:/partners/acme:minute"},
		{"more requests a second than the parent's minute", "/admin/rate-limits", `{"user_path":"/partners/acme/shop2","limit_key":{"period_seconds":1},"max_requests":150}`, "user_path:/partners/acme:minute"},
		{"more in flight", "/admin/rate-limits", `{"user_path":"/partners/acme/shop2","limit_key":{"period":"concurrent"},"max_requests":6}`, "user_path:/partners/acme:concurrent"},
		{"a larger budget", "/admin/budgets", `{"user_path":"/partners/acme/shop2","period":"day","amount_usd":"60"}`, "budget:user_path:/partners/acme:day"},
		{"a priority that lifts the parent", "/admin/rate-limits", `{"user_path":"/partners/acme/shop2","limit_key":{"period":"minute"},"max_requests":10,"priority":5}`, "user_path:/partners/acme:minute"},
	} {
		s, b := in.call(t, "POST", c.path, partner.Key, c.body)
		var e struct {
			Error struct {
				Message    string `json:"message"`
				ParentRule string `json:"parent_rule"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		if s != 400 || e.Error.ParentRule != c.parent || !strings.Contains(e.Error.Message, c.parent) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.what, s, b, c.parent)
		}
	}
	// An edit that would make a child looser is refused the same way.
	if s, b := in.call(t, "PATCH", "/admin/rate-limits/user_path:/partners/acme/shop:minute", partner.Key, `{"max_requests":101}`); s != 400 || !strings.Contains(string(b), "user_path:/partners/acme:minute") {
		t.Errorf("a looser edit: %d %s", s, b)
	}
	// A limit within the parent's on a longer window is no loosening.
	expect("a day's limit", 201, "POST", "/admin/rate-limits", partner.Key, `{"user_path":"/partners/acme/shop","limit_key":{"period":"day"},"max_requests":5000}`)

	// It sees its subtree only.
	var list struct {
		RateLimits []struct {
			ID string `json:"id"`
		} `json:"rate_limits"`
		Providers []any `json:"providers"`
	}
	_ = json.Unmarshal(expect("overview", 200, "GET", "/admin/overview", partner.Key, ""), &list)
	for _, r := range list.RateLimits {
		if !strings.Contains(r.ID, ":/partners/acme") {
			t.Errorf("the partner sees %s", r.ID)
		}
	}
	if len(list.RateLimits) < 4 || len(list.Providers) != 0 {
		t.Errorf("the partner's overview: %+v", list)
	}
	var keys struct {
		Keys []struct {
			ID       string `json:"id"`
			UserPath string `json:"user_path"`
		} `json:"keys"`
	}
	makeKey(t, in, master, `{"user_path":"/partners/other"}`)
	_ = json.Unmarshal(expect("keys", 200, "GET", "/admin/keys", partner.Key, ""), &keys)
	if len(keys.Keys) != 3 { // itself, shop, the revoked reseller
		t.Errorf("the partner lists keys %+v", keys.Keys)
	}
	for _, k := range keys.Keys {
		if !strings.HasPrefix(k.UserPath, "/partners/acme") {
			t.Errorf("the partner lists %+v", k)
		}
	}

	// Its key works through the gateway, counted by the rule it made.
	for range 2 {
		if s := in.chat(t, shop.Key); s != 200 {
			t.Fatalf("the shop's key through the gateway: %d", s)
		}
	}
	var one struct {
		Usage struct {
			Requests struct {
				Used int64 `json:"used"`
			} `json:"requests"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(expect("the shop's rule", 200, "GET", "/admin/rate-limits/user_path:/partners/acme/shop:minute", partner.Key, ""), &one)
	if one.Usage.Requests.Used != 2 {
		t.Errorf("the shop's rule counted %d requests, want 2", one.Usage.Requests.Used)
	}
	// The refusals the master made are not the partner's: a 409 of the
	// master's is not listed as applied either.
	expect("a duplicate", 409, "POST", "/admin/rate-limits", master, `{"user_path":"/partners/acme/shop","limit_key":{"period":"minute"},"max_requests":50}`)

	// Revoked, it administers nothing, at once; what it made still works.
	expect("revoking the partner", 200, "DELETE", "/admin/keys/"+partner.ID, master, "")
	for _, c := range []struct{ method, path, body string }{
		{"DELETE", "/admin/keys/" + shop.ID, ""},
		{"PATCH", "/admin/rate-limits/user_path:/partners/acme/shop:minute", `{"max_requests":30}`},
		{"GET", "/admin/rate-limits", ""},
	} {
		if s, b := in.call(t, c.method, c.path, partner.Key, c.body); s != 401 {
			t.Errorf("the revoked partner: %s %s: %d %s, want 401", c.method, c.path, s, b)
		}
	}
	if s := in.chat(t, shop.Key); s != 200 {
		t.Errorf("the shop's key after its partner was revoked: %d", s)
	}

	// The audit trail: each applied write, who made it, before and after.
	var trail struct {
		Entries []struct {
			Actor    string          `json:"actor"`
			Action   string          `json:"action"`
			Target   string          `json:"target"`
			UserPath string          `json:"user_path"`
			Before   json.RawMessage `json:"before"`
			After    json.RawMessage `json:"after"`
			Applied  bool            `json:"applied"`
		} `json:"entries"`
		Next string `json:"next_cursor"`
	}
	_ = json.Unmarshal(expect("the audit trail", 200, "GET", "/admin/audit?since=1h", master, ""), &trail)
	byTarget := map[string][]string{}
	for _, e := range trail.Entries {
		if !e.Applied {
			t.Errorf("an entry not applied: %+v", e)
		}
		byTarget[e.Target] = append(byTarget[e.Target], e.Actor+" "+e.Action)
	}
	want := map[string][]string{
		partner.ID:                             {"master DELETE /admin/keys/" + partner.ID, "master POST /admin/keys"},
		shop.ID:                                {partner.ID + " POST /admin/keys"},
		sub.ID:                                 {partner.ID + " DELETE /admin/keys/" + sub.ID, partner.ID + " POST /admin/keys"},
		"user_path:/partners/acme/shop:minute": {partner.ID + " PATCH /admin/rate-limits/user_path:/partners/acme/shop:minute", partner.ID + " POST /admin/rate-limits"},
		"budget:user_path:/partners/acme/shop:day":  {partner.ID + " POST /admin/budgets"},
		"user_path:/partners/acme/*:hour":           {partner.ID + " PUT /admin/rate-limits"},
		"user_path:/partners/acme/shop:day":         {partner.ID + " POST /admin/rate-limits"},
		"pause:user_path:/partners/acme/shop/beta":  {partner.ID + " DELETE /admin/pause", partner.ID + " POST /admin/pause"},
		"user_path:/partners/other:minute":          nil,
		"user_path:/partners/acme/legacy:minute":    nil,
		"user_path:/partners/acme/shop2:minute":     nil,
		"budget:user_path:/partners/acme/shop2:day": nil,
	}
	for target, w := range want {
		// The instance's clock stands still: entries of one instant come
		// in any order.
		slices.Sort(byTarget[target])
		slices.Sort(w)
		if fmt.Sprint(byTarget[target]) != fmt.Sprint(w) {
			t.Errorf("audit of %s: %v, want %v", target, byTarget[target], w)
		}
	}
	for _, e := range trail.Entries {
		if e.Target == "user_path:/partners/acme/shop:minute" && strings.HasPrefix(e.Action, "PATCH") {
			if !strings.Contains(string(e.Before), `"max_requests":50`) || !strings.Contains(string(e.After), `"max_requests":40`) || e.UserPath != "/partners/acme/shop" {
				t.Errorf("the edit's before and after: %s → %s (%s)", e.Before, e.After, e.UserPath)
			}
		}
		if e.Target == "user_path:/partners/acme/shop:minute" && strings.HasPrefix(e.Action, "POST") && (string(e.Before) != "null" || !strings.Contains(string(e.After), `"max_requests":50`)) {
			t.Errorf("the creation's before and after: %s → %s", e.Before, e.After)
		}
		if e.Target == partner.ID && strings.HasPrefix(e.Action, "DELETE") && (!strings.Contains(string(e.Before), `"revoked":false`) || !strings.Contains(string(e.After), `"revoked":true`)) {
			t.Errorf("the revocation's before and after: %s → %s", e.Before, e.After)
		}
	}
	// By subject: a user path's subtree.
	_ = json.Unmarshal(expect("the audit of a subtree", 200, "GET", "/admin/audit?subject=/partners/acme/shop", master, ""), &trail)
	for _, e := range trail.Entries {
		if !strings.HasPrefix(e.UserPath, "/partners/acme/shop") {
			t.Errorf("subject /partners/acme/shop lists %+v", e)
		}
	}
	if len(trail.Entries) < 6 {
		t.Errorf("subject /partners/acme/shop lists %d entries", len(trail.Entries))
	}
	expect("a bad since", 400, "GET", "/admin/audit?since=yesterday", master, "")
}

// A delegated key that reads the audit trail sees its subtree's entries
// only; a page is bounded and its cursor goes on.
func TestAuditPagesAndScope(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, partnerConfig)})
	partner := makeKey(t, in, master, `{"user_path":"/partners/acme","admin":true}`)
	for i := range 7 {
		if s, b := in.call(t, "POST", "/admin/rate-limits", master, fmt.Sprintf(`{"user_path":"/teams/t%d","limit_key":{"period":"minute"},"max_requests":5}`, i)); s != 201 {
			t.Fatalf("%d %s", s, b)
		}
		if s, b := in.call(t, "POST", "/admin/rate-limits", partner.Key, fmt.Sprintf(`{"user_path":"/partners/acme/p%d","limit_key":{"period":"minute"},"max_requests":5}`, i)); s != 201 {
			t.Fatalf("%d %s", s, b)
		}
	}
	type page struct {
		Entries []struct {
			Target string `json:"target"`
		} `json:"entries"`
		Next string `json:"next_cursor"`
	}
	var p page
	seen := map[string]bool{}
	for cursor, n := "", 0; ; n++ {
		s, b := in.call(t, "GET", "/admin/audit?limit=3&cursor="+url.QueryEscape(cursor), partner.Key, "")
		if s != 200 || json.Unmarshal(b, &p) != nil || len(p.Entries) > 3 {
			t.Fatalf("page %d: %d %s", n, s, b)
		}
		for _, e := range p.Entries {
			if e.Target == partner.ID {
				continue // its own creation, on its path
			}
			if !strings.HasPrefix(e.Target, "user_path:/partners/acme/") || seen[e.Target] {
				t.Errorf("the partner's trail lists %s (again: %v)", e.Target, seen[e.Target])
			}
			seen[e.Target] = true
		}
		if p.Next == "" || n > 10 {
			break
		}
		cursor = p.Next
	}
	if len(seen) != 7 {
		t.Errorf("the partner's trail lists %d of its 7 writes", len(seen))
	}
}
