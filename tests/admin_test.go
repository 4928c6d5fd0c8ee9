package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

const master = "sk-tollgate-master-admin-test"

// instance is one deployed environment of the stack (a gateway and an
// admin function sharing the DynamoDB tables), with its own clock.
type instance struct {
	app   *app.App
	srv   *httptest.Server
	logs  *bytes.Buffer
	clock *fakeClock
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newInstance(t *testing.T, prefix string, start time.Time, env config.Env) *instance {
	t.Helper()
	return newInstanceWith(t, prefix, start, env, nil)
}

// newInstanceWith is newInstance with the app adjusted by adjust before
// its handlers are built (nil: none).
func newInstanceWith(t *testing.T, prefix string, start time.Time, env config.Env, adjust func(*instance)) *instance {
	t.Helper()
	e := config.Env{
		"TOLLGATE_STORE": "dynamodb", "TOLLGATE_TABLE_PREFIX": prefix, "TOLLGATE_MASTER_KEY": master, "TOLLGATE_CONFIG": "",
	}
	for k, v := range env {
		e[k] = v
	}
	var logs bytes.Buffer
	a, err := app.New(context.Background(), e, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{app: a, logs: &logs, clock: &fakeClock{t: start}}
	a.Clock = in.clock.Now
	if adjust != nil {
		adjust(in)
	}
	if err := a.BuildGateway(); err != nil {
		t.Fatal(err)
	}
	if err := a.BuildAdmin(); err != nil {
		t.Fatal(err)
	}
	in.srv = httptest.NewServer(a.LocalHandler())
	t.Cleanup(in.srv.Close)
	return in
}

// call makes one request; it returns the status and body.
func (in *instance) call(t *testing.T, method, path, key, body string, hdr ...string) (int, []byte) {
	t.Helper()
	resp := in.do(t, method, path, key, body, hdr...)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// do makes one request (a JSON body when body is set) and returns the
// response, closed when the test ends.
func (in *instance) do(t *testing.T, method, path, key, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, in.srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func (in *instance) chat(t *testing.T, key string, hdr ...string) int {
	t.Helper()
	status, _ := in.call(t, "POST", "/v1/chat/completions", key,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, hdr...)
	return status
}

type ruleDoc struct {
	ID          string `json:"id"`
	Source      string `json:"source"`
	MaxTokens   int64  `json:"max_tokens"`
	Version     int64  `json:"version"`
	MaxRequests int64  `json:"max_requests"`
	Usage       *struct {
		Requests *struct {
			Used, Remaining, Limit int64
		} `json:"requests"`
		InFlight *struct {
			Used int64
		} `json:"in_flight"`
	} `json:"usage"`
}

func listRules(t *testing.T, in *instance) map[string]ruleDoc {
	t.Helper()
	status, body := in.call(t, "GET", "/admin/rate-limits", master, "")
	if status != 200 {
		t.Fatalf("list: %d %s", status, body)
	}
	var out struct {
		RateLimits []ruleDoc `json:"rate_limits"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	m := map[string]ruleDoc{}
	for _, r := range out.RateLimits {
		m[r.ID] = r
	}
	return m
}

func TestAdminAPI(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Now().Truncate(time.Hour)
	env := config.Env{"SET_RATE_LIMIT_CONFIGURED": "rpm=50"}
	a := newInstance(t, prefix, t0, env)

	// Authentication.
	if s, _ := a.call(t, "GET", "/admin/rate-limits", "", ""); s != 401 {
		t.Fatalf("no key: %d", s)
	}
	if s, _ := a.call(t, "GET", "/admin/rate-limits", "wrong", ""); s != 401 {
		t.Fatalf("wrong key: %d", s)
	}

	// Create, read with live usage, update limits (counters kept), move
	// (counters restart), delete.
	s, body := a.call(t, "POST", "/admin/rate-limits", master,
		`{"user_path":"/team/alpha","limit_key":{"period":"minute"},"max_requests":100,"max_tokens":50000}`)
	if s != 201 || !strings.Contains(string(body), `"version":1`) || !strings.Contains(string(body), `"id":"user_path:/team/alpha:minute"`) {
		t.Fatalf("create: %d %s", s, body)
	}
	if s, body := a.call(t, "POST", "/admin/rate-limits", master,
		`{"user_path":"/team/alpha","limit_key":{"period":"minute"},"max_requests":1}`); s != 409 || !strings.Contains(string(body), "already exists") {
		t.Fatalf("create twice: %d %s", s, body)
	}
	if s := a.chat(t, master, "X-Tollgate-User-Path", "/team/alpha/app"); s != 200 {
		t.Fatalf("chat: %d", s)
	}
	r := listRules(t, a)["user_path:/team/alpha:minute"]
	if r.Source != "manual" || r.Usage == nil || r.Usage.Requests.Used != 1 || r.Usage.Requests.Remaining != 99 {
		t.Fatalf("listed %+v", r)
	}
	if c := listRules(t, a)["user_path:/configured:minute"]; c.Source != "config" {
		t.Fatalf("config rule listed as %+v", listRules(t, a))
	}
	// GET one, by the id headers and /v1/usage give.
	getOne := func(id string) (int, ruleDoc) {
		s, body := a.call(t, "GET", "/admin/rate-limits/"+id, master, "")
		var d ruleDoc
		_ = json.Unmarshal(body, &d)
		return s, d
	}
	if s, d := getOne("user_path:/team/alpha:minute"); s != 200 || d.Version != 1 || d.Usage == nil || d.Usage.Requests.Used != 1 {
		t.Fatalf("get one: %d %+v", s, d)
	}
	if s, _ := getOne("user_path:/nobody:minute"); s != 404 {
		t.Fatalf("get of nothing: %d", s)
	}
	if s, _ := getOne("user_path:/team:fortnight"); s != 404 {
		t.Fatalf("get of a malformed id: %d", s)
	}
	// PUT creates or updates, as seed 000 says: without a version the last
	// writer wins; with one (in the body, or If-Match) it is conditional,
	// a stale one 409 with the current rule.
	if s, body := a.call(t, "PUT", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"max_requests":10,"version":7}`); s != 409 || !strings.Contains(string(body), `"version":1`) {
		t.Fatalf("PUT with a stale version: %d %s", s, body)
	}
	if s, body := a.call(t, "PUT", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"max_requests":10}`, "If-Match", `"7"`); s != 409 || !strings.Contains(string(body), `"current"`) {
		t.Fatalf("PUT with a stale If-Match: %d %s", s, body)
	}
	if s, body := a.call(t, "PUT", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"max_requests":10,"version":2}`, "If-Match", `"1"`); s != 400 {
		t.Fatalf("PUT whose version and If-Match disagree: %d %s", s, body)
	}
	s, body = a.call(t, "PUT", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"max_requests":10,"max_tokens":50000,"version":1}`)
	if s != 200 || !strings.Contains(string(body), `"version":2`) {
		t.Fatalf("update: %d %s", s, body)
	}
	if r := listRules(t, a)["user_path:/team/alpha:minute"]; r.MaxRequests != 10 || r.MaxTokens != 50000 || r.Usage.Requests.Used != 1 {
		t.Fatalf("limits edit must keep counters: %+v", r)
	}
	res := a.do(t, "PUT", "/admin/rate-limits", master, `{"user_path":"/team/alpha","limit_key":{"period":"minute"},"max_requests":15,"max_tokens":50000}`)
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || !strings.Contains(string(b), `"version":3`) || res.Header.Get("ETag") != `"3"` {
		t.Fatalf("PUT without a version (last writer wins): %d %s %v", res.StatusCode, b, res.Header)
	}
	if r := listRules(t, a)["user_path:/team/alpha:minute"]; r.MaxRequests != 15 || r.Usage.Requests.Used != 1 {
		t.Fatalf("a PUT of the limits must keep counters: %+v", r)
	}
	// PATCH changes only what it sends.
	s, body = a.call(t, "PATCH", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"max_requests":20}`, "If-Match", `"3"`)
	if s != 200 || !strings.Contains(string(body), `"version":4`) {
		t.Fatalf("patch: %d %s", s, body)
	}
	if _, d := getOne("user_path:/team/alpha:minute"); d.MaxRequests != 20 || d.MaxTokens != 50000 {
		t.Fatalf("PATCH of max_requests changed more: %+v", d)
	}
	if s, _ := a.call(t, "PATCH", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"max_requests":30,"version":2}`); s != 409 {
		t.Fatalf("PATCH with a stale version: %d", s)
	}
	if s, _ := a.call(t, "PATCH", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"max_requests":30}`, "If-Match", `"3"`); s != 409 {
		t.Fatalf("PATCH with a stale If-Match: %d", s)
	}
	if s, body := a.call(t, "PATCH", "/admin/rate-limits/user_path:/team/alpha:minute", master, `{"user_path":"/elsewhere"}`); s != 400 || !strings.Contains(string(body), "move") {
		t.Fatalf("PATCH of the identity: %d %s", s, body)
	}
	if s, _ := a.call(t, "PATCH", "/admin/rate-limits/user_path:/nobody:minute", master, `{"max_requests":3}`); s != 404 {
		t.Fatalf("PATCH of nothing: %d", s)
	}
	s, body = a.call(t, "PUT", "/admin/rate-limits", master,
		`{"user_path":"/team/alpha","limit_key":{"period":"hour"},"max_requests":10,"version":4,"from":{"id":"user_path:/team/alpha:minute"}}`)
	if s != 200 {
		t.Fatalf("move: %d %s", s, body)
	}
	rules := listRules(t, a)
	if _, old := rules["user_path:/team/alpha:minute"]; old {
		t.Fatal("the moved rule is still at its old key")
	}
	if r := rules["user_path:/team/alpha:hour"]; r.Usage == nil || r.Usage.Requests.Used != 0 {
		t.Fatalf("a moved rule's counters restart: %+v", r)
	}
	// Reset one rule by its id, then everything.
	if s := a.chat(t, master, "X-Tollgate-User-Path", "/team/alpha"); s != 200 {
		t.Fatal(s)
	}
	if s, body := a.call(t, "POST", "/admin/rate-limits/reset-one", master, `{"id":"user_path:/team/alpha:hour"}`); s != 200 || !strings.Contains(string(body), "user_path:/team/alpha:hour") {
		t.Fatalf("reset-one: %d %s", s, body)
	}
	if r := listRules(t, a)["user_path:/team/alpha:hour"]; r.Usage.Requests.Used != 0 {
		t.Fatalf("reset-one left %d", r.Usage.Requests.Used)
	}
	if s, body := a.call(t, "POST", "/admin/rate-limits/reset-one", master, `{"user_path":"/team/alpha","limit_key":{"period":"hour"}}`); s != 200 {
		t.Fatalf("reset-one by limit_key: %d %s", s, body)
	}
	if s, _ := a.call(t, "POST", "/admin/rate-limits/reset", master, `{"confirmation":"yes"}`); s != 400 {
		t.Fatalf("reset without the confirmation: %d", s)
	}
	if s, _ := a.call(t, "POST", "/admin/rate-limits/reset", master, `{"confirmation":"reset"}`); s != 200 {
		t.Fatalf("reset: %d", s)
	}
	if s, _ := a.call(t, "DELETE", "/admin/rate-limits/user_path:/team/alpha:hour", master, `{"version":1}`); s != 409 {
		t.Fatalf("delete with a stale version: %d", s)
	}
	if s, _ := a.call(t, "DELETE", "/admin/rate-limits/user_path:/team/alpha:hour", master, ""); s != 200 {
		t.Fatalf("delete: %d", s)
	}
	if s, _ := a.call(t, "DELETE", "/admin/rate-limits", master, `{"user_path":"/team/alpha","limit_key":{"period":"hour"}}`); s != 404 {
		t.Fatalf("delete twice: %d", s)
	}
	if s, _ := a.call(t, "POST", "/admin/rate-limits/reset-one", master, `{"id":"user_path:/nope:minute"}`); s != 404 {
		t.Fatalf("reset-one of nothing: %d", s)
	}

	// Config rules are read-only through the API.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/admin/rate-limits", `{"user_path":"/configured","limit_key":{"period":"minute"},"max_requests":1}`},
		{"PUT", "/admin/rate-limits/user_path:/configured:minute", `{"max_requests":1,"version":1}`},
		{"PATCH", "/admin/rate-limits/user_path:/configured:minute", `{"max_requests":1}`},
		{"DELETE", "/admin/rate-limits/user_path:/configured:minute", ``},
	} {
		if s, body := a.call(t, c.method, c.path, master, c.body); s != 409 || !strings.Contains(string(body), "read-only") {
			t.Fatalf("%s a config rule: %d %s", c.method, s, body)
		}
	}
	if s, d := getOne("user_path:/configured:minute"); s != 200 || d.Source != "config" || d.MaxRequests != 50 {
		t.Fatalf("GET of a config rule: %d %+v", s, d)
	}

	// Invalid input lists every bad field, unknown fields among them.
	fields := func(body []byte) map[string]bool {
		var e struct {
			Error struct {
				Fields []struct{ Field, Message string } `json:"fields"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		m := map[string]bool{}
		for _, f := range e.Error.Fields {
			m[f.Field] = true
		}
		return m
	}
	s, body = a.call(t, "POST", "/admin/rate-limits", master,
		`{"scope":"planet","limit_key":{"period":"fortnight","size":3},"max_requests":-1,"colour":"red","Shape":"round"}`)
	if got := fields(body); s != 400 || !got["scope"] || !got["limit_key.period"] || !got["limit_key.size"] || !got["colour"] || !got["Shape"] || !got["max_requests"] {
		t.Fatalf("invalid rule: %d %s", s, body)
	}
	s, body = a.call(t, "PATCH", "/admin/rate-limits/user_path:/configured:minute", master, `{"max_requests":"ten"}`)
	if s != 409 {
		t.Fatalf("PATCH of a config rule with a bad body: %d %s", s, body)
	}
	if s, _ := a.call(t, "GET", "/admin/nothing", master, ""); s != 404 {
		t.Fatalf("unknown admin route: %d", s)
	}
}

// Two concurrent edits of one rule: exactly one wins, the other gets 409
// with the current version.
func TestAdminConcurrentEdits(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	a := newInstance(t, prefix, time.Now(), nil)
	b := newInstance(t, prefix, time.Now(), nil)
	if s, body := a.call(t, "POST", "/admin/rate-limits", master, `{"scope":"provider","subject":"openai","limit_key":{"period":"minute"},"max_requests":500}`); s != 201 {
		t.Fatalf("create %d %s", s, body)
	}
	for round := range 5 {
		version := listRules(t, a)["provider:openai:minute"].Version
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		bodies := make([][]byte, 2)
		for i, in := range []*instance{a, b} {
			wg.Go(func() {
				statuses[i], bodies[i] = in.call(t, "PUT", "/admin/rate-limits", master,
					`{"scope":"provider","subject":"openai","limit_key":{"period":"minute"},"max_requests":`+
						[]string{"400", "600"}[i]+`,"version":`+itoa(version)+`}`)
			})
		}
		wg.Wait()
		won, lost := 0, 0
		for i, s := range statuses {
			switch s {
			case 200:
				won++
			case 409:
				lost++
				if !strings.Contains(string(bodies[i]), `"version":`+itoa(version+1)) {
					t.Fatalf("409 without the current version: %s", bodies[i])
				}
			default:
				t.Fatalf("round %d: status %d %s", round, s, bodies[i])
			}
		}
		if won != 1 || lost != 1 {
			t.Fatalf("round %d: %d won, %d lost; want exactly one of each", round, won, lost)
		}
	}
}

// A limit change made through one instance is enforced by another within
// the watcher's interval; a key revoked on one is refused by another
// within the key cache's TTL. The second instance's clock is stepped, not
// slept.
func TestAdminChangesReachOtherInstances(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Now().Truncate(time.Minute).Add(time.Second)
	a := newInstance(t, prefix, t0, nil)
	b := newInstance(t, prefix, t0, nil)

	if s, _ := a.call(t, "POST", "/admin/rate-limits", master, `{"user_path":"/team","limit_key":{"period":"minute"},"max_requests":100}`); s != 201 {
		t.Fatal(s)
	}
	b.clock.Add(configstore.DefaultInterval) // b looks at the store again
	if s := b.chat(t, master, "X-Tollgate-User-Path", "/team"); s != 200 {
		t.Fatal(s)
	}
	// Tighten to 1 a minute through a: b's window already holds 1.
	if s, _ := a.call(t, "PATCH", "/admin/rate-limits/user_path:/team:minute", master, `{"max_requests":1}`); s != 200 {
		t.Fatal(s)
	}
	b.clock.Add(configstore.DefaultInterval / 2)
	if s := b.chat(t, master, "X-Tollgate-User-Path", "/team"); s != 200 {
		t.Fatalf("inside the interval b still enforces the old limit; got %d", s)
	}
	b.clock.Add(configstore.DefaultInterval / 2)
	if s := b.chat(t, master, "X-Tollgate-User-Path", "/team"); s != 429 {
		t.Fatalf("after the interval b must enforce the new limit; got %d", s)
	}

	// Keys: created on a, used on b, revoked on a.
	s, body := a.call(t, "POST", "/admin/keys", master, `{"user_path":"/customers/acme","name":"ci"}`)
	if s != 201 {
		t.Fatalf("create key: %d %s", s, body)
	}
	var created struct{ ID, Key string }
	_ = json.Unmarshal(body, &created)
	if !strings.HasPrefix(created.Key, "tg-") || created.ID == "" {
		t.Fatalf("created %s", body)
	}
	if s := b.chat(t, created.Key); s != 200 {
		t.Fatalf("managed key on b: %d", s)
	}
	if s := b.chat(t, created.Key, "X-Tollgate-User-Path", "/customers/acme/app"); s != 200 {
		t.Fatalf("narrowing below the key's path: %d", s)
	}
	if s := b.chat(t, created.Key, "X-Tollgate-User-Path", "/customers/other"); s != 403 {
		t.Fatalf("a path outside the key's: %d, want 403", s)
	}
	if s, _ := a.call(t, "GET", "/admin/rate-limits", created.Key, ""); s != 403 {
		t.Fatalf("managed key on the admin API: %d, want 403", s)
	}
	status, usage := b.call(t, "GET", "/v1/usage", created.Key, "")
	if status != 200 || !strings.Contains(string(usage), `"user_path":"/customers/acme"`) {
		t.Fatalf("usage %d %s", status, usage)
	}
	if s, _ := a.call(t, "DELETE", "/admin/keys/"+created.ID, master, ""); s != 200 {
		t.Fatal(s)
	}
	if s := a.chat(t, created.Key); s != 401 {
		t.Fatalf("revoked key on a (its cache just refreshed): %d", s)
	}
	b.clock.Add(configstore.DefaultKeyTTL - time.Second)
	if s := b.chat(t, created.Key); s != 200 {
		t.Fatalf("within the cache TTL b may still accept: %d", s)
	}
	b.clock.Add(time.Second)
	if s := b.chat(t, created.Key); s != 401 {
		t.Fatalf("after the TTL b must refuse the revoked key: %d", s)
	}
	if s, _ := a.call(t, "DELETE", "/admin/keys/key_0000000000000000", master, ""); s != 404 {
		t.Fatalf("revoke unknown: %d", s)
	}
	if s, body := a.call(t, "POST", "/admin/keys", master, `{"user_path":"team//x","expires_in":"soon"}`); s != 400 ||
		!strings.Contains(string(body), "user_path") || !strings.Contains(string(body), "expires_in") {
		t.Fatalf("bad key request: %d %s", s, body)
	}

	// The secret appears in no log line and in no response but the one
	// that created it (nor does its hash).
	_, list := a.call(t, "GET", "/admin/keys", master, "")
	hash := configstore.Hash(created.Key)
	for what, text := range map[string]string{"a's logs": a.logs.String(), "b's logs": b.logs.String(), "key list": string(list)} {
		if strings.Contains(text, created.Key) || strings.Contains(text, hash) || strings.Contains(text, created.Key[9:]) {
			t.Fatalf("the secret leaked into %s", what)
		}
	}
	if !strings.Contains(string(list), created.ID) {
		t.Fatalf("key list %s", list)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// An admin body over the limit is 413, one that says it is not JSON 415,
// each in the admin API's error shape; nothing is changed.
func TestAdminBodyLimits(t *testing.T) {
	a := newInstance(t, dynamotest.Prefix(t), time.Now().Truncate(time.Hour), config.Env{})
	huge := `{"user_path":"/x","limit_key":{"period":"minute"},"max_requests":1,"pad":"` + strings.Repeat("x", 2<<20) + `"}`
	if s, body := a.call(t, "PUT", "/admin/rate-limits", master, huge); s != 413 || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("a 2 MiB body: %d %.200s", s, body)
	}
	if s, body := a.call(t, "PUT", "/admin/rate-limits", master, `user_path=/x`, "Content-Type", "text/plain"); s != 415 || !strings.Contains(string(body), "application/json") {
		t.Fatalf("text/plain: %d %s", s, body)
	}
	if rules := listRules(t, a); len(rules) != 0 {
		t.Fatalf("rules after refused bodies: %v", rules)
	}
}

// Ramps and fair shares through the admin API: stored, listed, kept by a
// PATCH of the limit (the ramp then ends at the new one), checked.
func TestAdminRampAndFairShare(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	a := newInstance(t, prefix, time.Now(), nil)
	s, body := a.call(t, "POST", "/admin/rate-limits", master, `{"scope":"provider","subject":"mock","limit_key":{"period":"minute"},
		"max_requests":600,"ramp":{"start":60,"step":60,"every":"5m"},"fair_share":{"by":"user_path","weights":{"/t/a":3}}}`)
	if s != 201 || !strings.Contains(string(body), `"ramp":{"start":60,"step":60,"every":"5m0s","max":600}`) ||
		!strings.Contains(string(body), `"fair_share":{"by":"user_path","weights":{"/t/a":3}}`) {
		t.Fatalf("create: %d %s", s, body)
	}
	if s, body := a.call(t, "PATCH", "/admin/rate-limits/provider:mock:minute", master, `{"max_requests":1200}`); s != 200 ||
		!strings.Contains(string(body), `"max":1200`) || !strings.Contains(string(body), `"fair_share"`) {
		t.Fatalf("patch: %d %s", s, body)
	}
	if r, ok := a.app.Limiter.Rules().Lookup("provider:mock:60"); !ok || r.Ramp == nil || r.FairShare == nil || r.MaxRequests != 60 {
		t.Fatalf("the limiter's rule %+v: want it ramped to 60 with its fair share", r)
	}
	if s, body := a.call(t, "POST", "/admin/budgets", master, `{"user_path":"/","period":"day","amount_usd":"100","fair_share":{"by":"child","weights":{"research":2}}}`); s != 201 ||
		!strings.Contains(string(body), `"fair_share":{"by":"child","weights":{"research":2}}`) {
		t.Fatalf("budget with a fair share: %d %s", s, body)
	}
	s, body = a.call(t, "POST", "/admin/rate-limits", master, `{"user_path":"/x","limit_key":{"period":"minute"},"max_requests":5,
		"ramp":{"start":0,"every":"soon"},"fair_share":{"by":"planet"}}`)
	if s != 400 || !strings.Contains(string(body), "ramp.every") || !strings.Contains(string(body), "fair_share.by") || !strings.Contains(string(body), "ramp.step") {
		t.Fatalf("bad ramp and fair share: %d %s", s, body)
	}
}

// In dev mode (no master key, as under `make run`) any bearer is the
// master, but a managed key is that key: its user path binds it, a path
// outside it is 403, and once revoked it is refused at once by the
// instance that revoked it, whose cache had just seen it live.
func TestManagedKeysBindInDevMode(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	a := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_MASTER_KEY": ""})
	s, body := a.call(t, "POST", "/admin/keys", "anything", `{"user_path":"/customers/acme","name":"dev"}`)
	if s != 201 {
		t.Fatalf("create key in dev mode: %d %s", s, body)
	}
	var created struct{ ID, Key string }
	_ = json.Unmarshal(body, &created)
	status, usage := a.call(t, "GET", "/v1/usage", created.Key, "")
	if status != 200 || !strings.Contains(string(usage), `"user_path":"/customers/acme"`) {
		t.Fatalf("the key's usage in dev mode: %d %s", status, usage)
	}
	if s := a.chat(t, created.Key, "X-Tollgate-User-Path", "/customers/other"); s != 403 {
		t.Fatalf("a path outside the key's in dev mode: %d, want 403", s)
	}
	if s := a.chat(t, "any-other-bearer", "X-Tollgate-User-Path", "/customers/other"); s != 200 {
		t.Fatalf("any other bearer is dev mode's master: %d", s)
	}
	if s := a.chat(t, created.Key); s != 200 {
		t.Fatalf("the live key: %d", s)
	}
	if s, _ := a.call(t, "DELETE", "/admin/keys/"+created.ID, "anything", ""); s != 200 {
		t.Fatal(s)
	}
	if s := a.chat(t, created.Key); s != 401 {
		t.Fatalf("a key revoked on this instance, seen live a moment ago: %d, want 401 at once", s)
	}
}
