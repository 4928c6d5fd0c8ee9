package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// realtimeConfig lets /rt hold one Realtime session at a time and 1,500
// tokens a minute, each session reserving 1,000.
const realtimeConfig = `
rate_limits:
  user_paths:
    - path: /rt
      per_child: true
      limits:
        - {period: concurrent, max_requests: 1}
    - path: /tokens
      limits:
        - {period: minute, max_tokens: 1500}
gateway:
  realtime_max_session: 10m
  realtime_session_tokens: 1000
`

// Minting Realtime credentials holds a slot past the answer, for the
// session's maximum duration, on DynamoDB Local across two instances: the
// second session is refused while the first is open, ending it on the
// other instance gives the slot back, a session nobody ends frees at its
// expiry; the ephemeral secret passes through untouched; a session's
// tokens are reserved.
func TestRealtimeSessionsHoldTheirSlot(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	// A day ahead: DynamoDB Local's TTL sweeper removes items whose ttl
	// (the session's expiry and an hour) is past in real time.
	t0 := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	env := config.Env{"TOLLGATE_CONFIG": writeConfig(t, realtimeConfig)}
	a := newInstance(t, prefix, t0, env)
	b := newInstance(t, prefix, t0, env)
	var sessionHeader string
	mint := func(in *instance, path, route, body string) (int, map[string]any, string) {
		t.Helper()
		res := in.do(t, "POST", route, master, body, "X-Tollgate-User-Path", path)
		raw, _ := io.ReadAll(res.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		sessionHeader = res.Header.Get("X-Tollgate-Session-Id")
		return res.StatusCode, m, res.Header.Get("X-Tollgate-Rule")
	}
	const secrets = `{"session":{"type":"realtime","model":"gpt-realtime"}}`
	s, first, _ := mint(a, "/rt/alice", "/v1/realtime/client_secrets", secrets)
	if s != 200 || !strings.HasPrefix(first["value"].(string), "ek_mock_") {
		t.Fatalf("mint: %d %v", s, first)
	}
	id := first["session"].(map[string]any)["id"].(string)
	if sessionHeader != id {
		t.Fatalf("X-Tollgate-Session-Id %q, want the upstream's id %q", sessionHeader, id)
	}
	if s, _, rule := mint(b, "/rt/alice", "/v1/realtime/sessions", `{"model":"gpt-realtime"}`); s != 429 || rule != "user_path:/rt/*:concurrent" {
		t.Fatalf("a second session while the first is open: %d %s", s, rule)
	}
	if s, _, _ := mint(b, "/rt/bob", "/v1/realtime/sessions", `{"model":"gpt-realtime"}`); s != 200 {
		t.Fatalf("another child has its own slot: %d", s)
	}
	// Only the session's user path (or one above it) may end it.
	if s, b := b.call(t, "POST", "/v1/realtime/sessions/"+id+"/end", master, "", "X-Tollgate-User-Path", "/rt/bob"); s != 404 {
		t.Fatalf("ended by another path: %d %s", s, b)
	}
	if s, body := b.call(t, "POST", "/v1/realtime/sessions/"+id+"/end", master, "", "X-Tollgate-User-Path", "/rt/alice"); s != 200 || !strings.Contains(string(body), `"ended":true`) {
		t.Fatalf("end: %d %s", s, body)
	}
	if s, _ := b.call(t, "POST", "/v1/realtime/sessions/"+id+"/end", master, "", "X-Tollgate-User-Path", "/rt/alice"); s != 404 {
		t.Fatalf("ended twice: %d", s)
	}
	s, second, _ := mint(a, "/rt/alice", "/v1/realtime/sessions", `{"model":"gpt-realtime"}`)
	if s != 200 || second["client_secret"] == nil {
		t.Fatalf("after the end the slot is back: %d %v", s, second)
	}
	// Nobody ends this one: its slot frees at the session's maximum.
	for _, in := range []*instance{a, b} {
		in.clock.Add(10*time.Minute + time.Second)
	}
	if rc, err := b.app.NewReconciler(t.Context()); err != nil {
		t.Fatal(err)
	} else if _, err := rc.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, _, rule := mint(b, "/rt/alice", "/v1/realtime/client_secrets", secrets); s != 200 {
		t.Fatalf("after the session's maximum the slot is back: %d %s", s, rule)
	}

	// Each session reserves 1,000 tokens: the second in a minute does not fit 1,500.
	if s, _, _ := mint(a, "/tokens", "/v1/realtime/client_secrets", secrets); s != 200 {
		t.Fatalf("first session: %d", s)
	}
	if s, _, rule := mint(a, "/tokens", "/v1/realtime/client_secrets", secrets); s != 429 || rule != "user_path:/tokens:minute" {
		t.Fatalf("second session's tokens: %d %s", s, rule)
	}
	if s, _, _ := mint(a, "/tokens", "/v1/realtime/client_secrets", `{"session":{"type":"realtime"}}`); s != 400 {
		t.Fatalf("no model: %d", s)
	}
}

// An upstream whose answer names no session still has its session hold
// the slot: the gateway keys it by its own id, returned in
// X-Tollgate-Session-Id (the upstream's id when it has one), and accepts
// that id to end it. Ending another caller's session changes nothing.
func TestRealtimeSessionWithoutAnUpstreamID(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"value":"ek_no_id","expires_at":1893456000}`) // no session id anywhere
	})
	env := config.Env{"OPENAI_API_KEY": "sk-test", "TOLLGATE_CONFIG": writeConfig(t, realtimeConfig+`
providers:
  - {name: openai, type: openai, base_url: `+up.URL+`/v1, api_key_env: OPENAI_API_KEY}
`)}
	in := newInstance(t, prefix, t0, env)
	const secrets = `{"session":{"type":"realtime","model":"gpt-realtime"}}`
	res := in.do(t, "POST", "/v1/realtime/client_secrets", master, secrets, "X-Tollgate-User-Path", "/rt/alice")
	body, _ := io.ReadAll(res.Body)
	id := res.Header.Get("X-Tollgate-Session-Id")
	if res.StatusCode != 200 || !strings.Contains(string(body), "ek_no_id") || !strings.HasPrefix(id, "tgs_") {
		t.Fatalf("mint: %d %s, session id %q", res.StatusCode, body, id)
	}
	if s, _ := in.call(t, "POST", "/v1/realtime/client_secrets", master, secrets, "X-Tollgate-User-Path", "/rt/alice"); s != 429 {
		t.Fatalf("a second session while the first (with no upstream id) is open: %d, want 429", s)
	}
	if s, _ := in.call(t, "POST", "/v1/realtime/sessions/"+id+"/end", master, "", "X-Tollgate-User-Path", "/rt/bob"); s != 404 {
		t.Fatalf("ended by another caller: %d", s)
	}
	if s, _ := in.call(t, "POST", "/v1/realtime/client_secrets", master, secrets, "X-Tollgate-User-Path", "/rt/alice"); s != 429 {
		t.Fatalf("another caller's end freed the slot: %d", s)
	}
	if s, b := in.call(t, "POST", "/v1/realtime/sessions/"+id+"/end", master, "", "X-Tollgate-User-Path", "/rt/alice"); s != 200 {
		t.Fatalf("end by the gateway's id: %d %s", s, b)
	}
	if s, _ := in.call(t, "POST", "/v1/realtime/client_secrets", master, secrets, "X-Tollgate-User-Path", "/rt/alice"); s != 200 {
		t.Fatalf("after the end the slot is back: %d", s)
	}
}
