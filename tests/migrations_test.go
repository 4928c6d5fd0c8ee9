package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// migrationConfig moves /team from gpt-4o to gpt-4o-mini: 10 % of its
// tenants first, 40 points more every 5 seconds.
const migrationConfig = `
providers:
  - {name: openai, type: compatible, base_url: UPSTREAM/v1}
migrations:
  - name: mini
    from: openai/gpt-4o
    to: openai/gpt-4o-mini
    scope: /team
    share: {start: 10, step: 40, every: 5s, max: 100}
    sticky: user_path
    hold_when: {upstream_429_rate: 0.02, error_rate: 0.01, p95_latency_ratio: 1.5}
    rollback_when: {error_rate: 0.1}
`

type migrationDoc struct {
	Name    string  `json:"name"`
	Share   float64 `json:"share"`
	State   string  `json:"state"`
	Holding string  `json:"holding"`
	History []struct {
		Share float64 `json:"share"`
		Why   string  `json:"why"`
	} `json:"history"`
}

// A migration on DynamoDB Local, two instances, stepped clocks: of 400
// distinct tenants about 10 % reach gpt-4o-mini in the first interval and
// about 50 % in the next, each tenant on the same side through an
// interval (and once migrated, after); a gpt-4o-mini answering 429 to 5 %
// of its requests holds the share; a rollback sends everything to gpt-4o
// on both instances within the rules' refresh (2 s).
func TestMigrationStepsHoldsAndRollsBack(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	var toCalls, fromCalls atomic.Int64
	var failing atomic.Bool
	ok := replay(t, "openai_chat.json", 200)
	tooMany := replay(t, "openai_error_429.json", 429)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch body.Model {
		case "gpt-4o-mini":
			if n := toCalls.Add(1); failing.Load() && n%20 == 0 {
				tooMany(w, r)
				return
			}
		case "gpt-4o":
			fromCalls.Add(1)
		default:
			t.Errorf("a request for %q", body.Model)
		}
		ok(w, r)
	})
	env := config.Env{"OPENAI_API_KEY": "sk-test",
		"TOLLGATE_CONFIG": writeConfig(t, strings.ReplaceAll(migrationConfig, "UPSTREAM", up.URL))}
	t0 := time.Now().Truncate(time.Hour).Add(time.Hour)
	a := newInstance(t, prefix, t0, env)
	b := newInstance(t, prefix, t0, env)
	step := func(d time.Duration) {
		a.clock.Add(d)
		b.clock.Add(d)
	}
	const body = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	// send asks for tenant i through instance in and reports whether the
	// answer was migrated.
	send := func(in *instance, i int) bool {
		t.Helper()
		res := in.do(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", fmt.Sprintf("/team/t%04d", i))
		if res.StatusCode != 200 {
			t.Fatalf("tenant %d: %d", i, res.StatusCode)
		}
		return res.Header.Get("X-Tollgate-Migration") == "mini"
	}
	// round sends tenants from..from+n through alternate instances, and
	// returns who was migrated.
	round := func(from, n int) map[int]bool {
		out := map[int]bool{}
		for i := from; i < from+n; i++ {
			out[i] = send([]*instance{a, b}[i%2], i)
		}
		return out
	}
	share := func(got map[int]bool) float64 {
		n := 0
		for _, m := range got {
			if m {
				n++
			}
		}
		return 100 * float64(n) / float64(len(got))
	}
	list := func(in *instance) migrationDoc {
		t.Helper()
		s, raw := in.call(t, "GET", "/admin/migrations", master, "")
		var out struct{ Migrations []migrationDoc }
		if err := json.Unmarshal(raw, &out); s != 200 || err != nil || len(out.Migrations) != 1 {
			t.Fatalf("GET /admin/migrations: %d %s", s, raw)
		}
		return out.Migrations[0]
	}

	first := round(0, 400)
	if s := share(first); math.Abs(s-10) > 5 {
		t.Fatalf("first interval: %.1f %% of 400 tenants migrated, want 10 %% ± 5", s)
	}
	if int(toCalls.Load()) != int(math.Round(share(first)*4)) {
		t.Fatalf("%d requests reached gpt-4o-mini, %.1f %% said so", toCalls.Load(), share(first))
	}
	for i := range 100 { // the other instance, the same interval: the same side
		if got := send([]*instance{b, a}[i%2], i); got != first[i] {
			t.Fatalf("tenant %d: migrated %v, then %v within the interval", i, first[i], got)
		}
	}
	t.Logf("first interval: %.1f %% migrated", share(first))

	step(5 * time.Second)
	second := round(0, 400)
	if s := share(second); math.Abs(s-50) > 8 {
		t.Fatalf("second interval: %.1f %% of 400 tenants migrated, want 50 %% ± 8", s)
	}
	for i, m := range first {
		if m && !second[i] {
			t.Fatalf("tenant %d went back to gpt-4o as the share grew", i)
		}
	}
	t.Logf("second interval: %.1f %% migrated", share(second))
	if m := list(b); m.Share != 50 || m.State != "running" || len(m.History) != 2 {
		t.Fatalf("after one interval: %+v", m)
	}
	var ex struct {
		Decision struct {
			Target, Migration string
		}
		Migration *struct {
			Name     string
			Share    float64
			Migrated bool
		}
	}
	migrated := 0
	for ; !second[migrated]; migrated++ {
	}
	_, eb := a.call(t, "POST", "/admin/explain", master, fmt.Sprintf(`{"user_path":"/team/t%04d","model":"gpt-4o"}`, migrated))
	if err := json.Unmarshal(eb, &ex); err != nil || ex.Decision.Target != "openai/gpt-4o-mini" || ex.Decision.Migration != "mini" ||
		ex.Migration == nil || !ex.Migration.Migrated || ex.Migration.Share != 50 {
		t.Fatalf("explain of a migrated tenant: %s", eb)
	}

	// 429s to 5 % of gpt-4o-mini's requests: the share holds at 50.
	step(5 * time.Second) // the second step: 90 %
	failing.Store(true)
	toBefore := toCalls.Load()
	round(1000, 400)
	step(configstore.DefaultInterval) // each instance adds what it counted
	send(a, 0)
	send(b, 1)
	step(5*time.Second - configstore.DefaultInterval)
	send(a, 2)
	failing.Store(false)
	m := list(b)
	if m.Share != 90 || m.State != "holding" || !strings.Contains(m.Holding, "upstream_429_rate") {
		t.Fatalf("after an interval with 429s on %d requests of gpt-4o-mini: %+v", toCalls.Load()-toBefore, m)
	}
	t.Logf("held at %.0f %%: %s", m.Share, m.Holding)

	// A rollback: everything to gpt-4o on both instances within 2 s.
	if s, raw := a.call(t, "POST", "/admin/migrations/mini/rollback", master, ""); s != 200 {
		t.Fatalf("rollback: %d %s", s, raw)
	}
	step(configstore.DefaultInterval)
	toBefore = toCalls.Load()
	if got := share(round(0, 200)); got != 0 || toCalls.Load() != toBefore {
		t.Fatalf("after the rollback: %.1f %% migrated", got)
	}
	if m := list(b); m.Share != 0 || m.State != "rolled_back" {
		t.Fatalf("after the rollback: %+v", m)
	}
	step(10 * time.Second) // it stays rolled back
	if got := share(round(0, 20)); got != 0 {
		t.Fatalf("after the rollback: %.1f %% migrated", got)
	}
}

// A migration moves only the requests its target can take: with every
// tenant of /team drawn for small (8k), a 20k-token prompt stays on big,
// and explain shows the draw and why small was skipped; a short prompt
// goes to small with the header, a caller outside the scope stays on big.
func TestMigrationOnlyToACompatibleTarget(t *testing.T) {
	in := newInstance(t, dynamotest.Prefix(t), time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		config.Env{"TOLLGATE_CONFIG": writeConfig(t, `
providers:
  - name: openai
    type: mock
    models:
      - {id: big, context_window: 128000}
      - {id: small, context_window: 8192}
migrations:
  - {name: small, from: openai/big, to: openai/small, scope: /team, share: {start: 100, step: 0, every: 1h}}
`)})
	chat := func(prompt string) string {
		return `{"model":"openai/big","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":100}`
	}
	long := strings.Repeat("word ", 20_000)
	for _, tc := range []struct {
		path, prompt, model, migration string
	}{
		{"/team/a", "hi", "small", "small"},
		{"/team/a", long, "big", ""},
		{"/other", "hi", "big", ""},
	} {
		res := in.do(t, "POST", "/v1/chat/completions", master, chat(tc.prompt), "X-Tollgate-User-Path", tc.path)
		if res.StatusCode != 200 || res.Header.Get("X-Tollgate-Model") != tc.model || res.Header.Get("X-Tollgate-Migration") != tc.migration {
			t.Fatalf("%s, a prompt of %d bytes: %d at %q, migration %q; want %s, %q", tc.path, len(tc.prompt), res.StatusCode,
				res.Header.Get("X-Tollgate-Model"), res.Header.Get("X-Tollgate-Migration"), tc.model, tc.migration)
		}
	}
	_, b := in.call(t, "POST", "/admin/explain", master, `{"user_path":"/team/a","model":"openai/big","input_tokens":20000}`)
	var ex struct {
		explained
		Migration *struct {
			Name     string  `json:"name"`
			Share    float64 `json:"share"`
			Migrated bool    `json:"migrated"`
		} `json:"migration"`
	}
	if err := json.Unmarshal(b, &ex); err != nil || ex.Decision.Target != "openai/big" || ex.Migration == nil || !ex.Migration.Migrated ||
		ex.Migration.Share != 100 || len(ex.Targets) != 2 || ex.Targets[0].Target != "openai/small" || ex.Targets[0].Skipped != "incompatible" ||
		!strings.Contains(ex.Targets[0].Why, "context window") {
		t.Fatalf("explain of a long prompt drawn for the migration: %s", b)
	}
}
