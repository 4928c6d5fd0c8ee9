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

// migrationPair is two instances on one DynamoDB Local prefix, their
// clocks stepped together, in front of an upstream that answers
// gpt-4o-mini (the migration's to) and gpt-4o (its from) as answer says:
// a status, and how long the answer takes on the instances' clocks (the
// upstream moves both, so the admission measures a latency).
type migrationPair struct {
	a, b               *instance
	toCalls, fromCalls atomic.Int64
	// migrated counts the answers that said x-tollgate-migration: mini.
	migrated int
}

// migrationAnswer says how the upstream answers the nth request for
// model.
type migrationAnswer func(model string, n int64) (status int, took time.Duration)

func newMigrationPair(t *testing.T, cfg string, answer migrationAnswer) *migrationPair {
	t.Helper()
	p := &migrationPair{}
	ok, tooMany, failed := replay(t, "openai_chat.json", 200), replay(t, "openai_error_429.json", 429), replay(t, "openai_error_500.json", 500)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		var n int64
		switch body.Model {
		case "gpt-4o-mini":
			n = p.toCalls.Add(1)
		case "gpt-4o":
			n = p.fromCalls.Add(1)
		default:
			t.Errorf("a request for %q", body.Model)
		}
		status, took := answer(body.Model, n)
		p.step(took)
		map[int]http.HandlerFunc{200: ok, 429: tooMany, 500: failed}[status](w, r)
	})
	env := config.Env{"OPENAI_API_KEY": "sk-test", "TOLLGATE_CONFIG": writeConfig(t, strings.ReplaceAll(cfg, "UPSTREAM", up.URL))}
	t0 := time.Now().Truncate(time.Hour).Add(time.Hour)
	prefix := dynamotest.Prefix(t)
	p.a, p.b = newInstance(t, prefix, t0, env), newInstance(t, prefix, t0, env)
	return p
}

func (p *migrationPair) step(d time.Duration) {
	p.a.clock.Add(d)
	p.b.clock.Add(d)
}

// send asks for gpt-4o for tenant i through instance in and reports
// whether the answer was migrated.
func (p *migrationPair) send(t *testing.T, in *instance, i int) bool {
	t.Helper()
	res := in.do(t, "POST", "/v1/chat/completions", master, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`,
		"X-Tollgate-User-Path", fmt.Sprintf("/team/t%04d", i))
	if res.StatusCode != 200 {
		t.Fatalf("tenant %d: %d", i, res.StatusCode)
	}
	m := res.Header.Get("X-Tollgate-Migration") == "mini"
	if m {
		p.migrated++
	}
	return m
}

// round sends tenants from..from+n through alternate instances and
// returns who was migrated.
func (p *migrationPair) round(t *testing.T, from, n int) map[int]bool {
	t.Helper()
	out := map[int]bool{}
	for i := from; i < from+n; i++ {
		out[i] = p.send(t, []*instance{p.a, p.b}[i%2], i)
	}
	return out
}

// settle ends an interval the way the fleet does: each instance adds what
// it counted to the store (a look at the store past the rules' refresh),
// then, at the interval's end, one of them judges and steps.
func (p *migrationPair) settle(t *testing.T, interval time.Duration) {
	t.Helper()
	p.step(configstore.DefaultInterval)
	p.send(t, p.a, 0)
	p.send(t, p.b, 1)
	p.step(interval - configstore.DefaultInterval)
	p.send(t, p.a, 2)
	p.step(configstore.DefaultInterval) // the other instance reads the step
	p.send(t, p.b, 3)
}

func migratedShare(got map[int]bool) float64 {
	n := 0
	for _, m := range got {
		if m {
			n++
		}
	}
	return 100 * float64(n) / float64(len(got))
}

func (p *migrationPair) list(t *testing.T, in *instance) migrationDoc {
	t.Helper()
	s, raw := in.call(t, "GET", "/admin/migrations", master, "")
	var out struct{ Migrations []migrationDoc }
	if err := json.Unmarshal(raw, &out); s != 200 || err != nil || len(out.Migrations) != 1 {
		t.Fatalf("GET /admin/migrations: %d %s", s, raw)
	}
	return out.Migrations[0]
}

func (p *migrationPair) control(t *testing.T, in *instance, action string) migrationDoc {
	t.Helper()
	s, raw := in.call(t, "POST", "/admin/migrations/mini/"+action, master, "")
	var out migrationDoc
	if err := json.Unmarshal(raw, &out); s != 200 || err != nil {
		t.Fatalf("POST /admin/migrations/mini/%s: %d %s", action, s, raw)
	}
	return out
}

// migratedMetric is the sum over both instances of the Migrated counter
// of migration mini to gpt-4o-mini, as GET /metrics serves it.
func (p *migrationPair) migratedMetric(t *testing.T) float64 {
	t.Helper()
	sum := 0.0
	for _, in := range []*instance{p.a, p.b} {
		_, raw := in.call(t, "GET", "/metrics", "", "")
		for _, line := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(line, "tollgate_migrated_total{") || !strings.Contains(line, `migration="mini"`) ||
				!strings.Contains(line, `to="openai/gpt-4o-mini"`) {
				continue
			}
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

func sameSides(t *testing.T, what string, want, got map[int]bool) {
	t.Helper()
	for i, m := range want {
		if got[i] != m {
			t.Fatalf("%s: tenant %d migrated %v, before %v", what, i, got[i], m)
		}
	}
}

// A paused migration does not step: across two intervals on two
// instances the share stays at its start and every tenant on its side;
// resumed, it steps again at the end of the next interval. The Migrated
// counter of both instances adds up to the answers that said so.
func TestMigrationPauseAndResume(t *testing.T) {
	p := newMigrationPair(t, migrationConfig, func(string, int64) (int, time.Duration) { return 200, 0 })
	first := p.round(t, 0, 400)
	if s := migratedShare(first); math.Abs(s-10) > 5 {
		t.Fatalf("first interval: %.1f %% migrated, want 10 %% ± 5", s)
	}
	if m := p.control(t, p.a, "pause"); m.State != "paused" || m.Share != 10 {
		t.Fatalf("paused: %+v", m)
	}
	for i := range 2 { // two intervals: no step
		p.settle(t, 5*time.Second)
		sameSides(t, fmt.Sprintf("paused, interval %d", i+2), first, p.round(t, 0, 400))
	}
	for _, in := range []*instance{p.a, p.b} {
		if m := p.list(t, in); m.Share != 10 || m.State != "paused" || len(m.History) != 2 || !strings.HasPrefix(m.History[1].Why, "paused: by master") {
			t.Fatalf("paused for two intervals: %+v", m)
		}
	}
	t.Logf("paused: %.1f %% of 400 tenants migrated through two intervals, each on its side", migratedShare(first))

	if m := p.control(t, p.b, "resume"); m.State != "running" || m.Share != 10 {
		t.Fatalf("resumed: %+v", m)
	}
	sameSides(t, "resumed, within the interval", first, p.round(t, 0, 400))
	p.settle(t, 5*time.Second)
	second := p.round(t, 0, 400)
	if s := migratedShare(second); math.Abs(s-50) > 8 {
		t.Fatalf("after the resumed interval: %.1f %% migrated, want 50 %% ± 8", s)
	}
	m := p.list(t, p.a)
	if m.Share != 50 || m.State != "running" || len(m.History) != 4 || !strings.HasPrefix(m.History[2].Why, "resumed") || m.History[3].Why != "stepped" {
		t.Fatalf("after the resumed interval: %+v", m)
	}
	t.Logf("resumed: %.1f %% migrated after the next interval", migratedShare(second))
	if got := p.migratedMetric(t); got != float64(p.migrated) || got != float64(p.toCalls.Load()) {
		t.Fatalf("Migrated counts %v on both instances, %d answers said migrated, gpt-4o-mini had %d requests", got, p.migrated, p.toCalls.Load())
	}
	t.Logf("Migrated: %v on both instances, as many as the answers that said so", p.migratedMetric(t))
}

// rollback_when on its own: a gpt-4o-mini failing one request in four
// (error_rate 0.25, above 0.1) has the migration rolled back to 0 at the
// end of the interval, the failed requests served by gpt-4o meanwhile;
// then neither instance sends anything to gpt-4o-mini, and the next
// intervals leave it at 0.
func TestMigrationRollsBackOnItsOwn(t *testing.T) {
	p := newMigrationPair(t, migrationConfig, func(model string, n int64) (int, time.Duration) {
		if model == "gpt-4o-mini" && n%4 == 0 {
			return 500, 0
		}
		return 200, 0
	})
	first := p.round(t, 0, 400)
	if s := migratedShare(first); math.Abs(s-10) > 5 {
		t.Fatalf("first interval: %.1f %% migrated, want 10 %% ± 5", s)
	}
	to := p.toCalls.Load()
	p.settle(t, 5*time.Second)
	m := p.list(t, p.b)
	if m.Share != 0 || m.State != "rolled_back" || !strings.Contains(m.History[len(m.History)-1].Why, "rolled back: error_rate") {
		t.Fatalf("after an interval with gpt-4o-mini failing 1 in 4 of %d requests: %+v", to, m)
	}
	t.Logf("%.1f %% migrated, %d requests to gpt-4o-mini: %s", migratedShare(first), to, m.History[len(m.History)-1].Why)
	before := p.toCalls.Load()
	for range 2 {
		if s := migratedShare(p.round(t, 0, 400)); s != 0 || p.toCalls.Load() != before {
			t.Fatalf("rolled back: %.1f %% migrated, %d requests to gpt-4o-mini", s, p.toCalls.Load()-before)
		}
		p.settle(t, 5*time.Second)
	}
	if m := p.list(t, p.a); m.Share != 0 || m.State != "rolled_back" {
		t.Fatalf("two intervals after the rollback: %+v", m)
	}
}

// hold_when's p95_latency_ratio: gpt-4o-mini taking 20 ms (on the
// instances' clocks) where gpt-4o takes 5 holds the share at its start
// (p95 23 ms against 5 ms in the histograms' buckets, a ratio of 4.6 above
// 1.5); as fast as gpt-4o in the next interval, it steps.
func TestMigrationHoldsOnLatency(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	p := newMigrationPair(t, migrationConfig, func(model string, _ int64) (int, time.Duration) {
		if model == "gpt-4o-mini" && slow.Load() {
			return 200, 20 * time.Millisecond
		}
		return 200, 5 * time.Millisecond
	})
	first := p.round(t, 0, 200)
	p.settle(t, 5*time.Second)
	m := p.list(t, p.a)
	if m.Share != 10 || m.State != "holding" || !strings.Contains(m.Holding, "p95_latency_ratio 4.6 above 1.5") {
		t.Fatalf("after an interval with gpt-4o-mini at 20 ms, gpt-4o at 5 ms: %+v", m)
	}
	t.Logf("%.1f %% of 200 tenants migrated; held: %s", migratedShare(first), m.Holding)
	slow.Store(false)
	p.round(t, 0, 200)
	p.settle(t, 5*time.Second)
	if m := p.list(t, p.b); m.Share != 50 || m.State != "running" {
		t.Fatalf("after an interval with both at 5 ms: %+v", m)
	}
}
