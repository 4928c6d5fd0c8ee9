package tests

import (
	"encoding/json"
	"io"
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
	mint := func(in *instance, path, route, body string) (int, map[string]any, string) {
		t.Helper()
		res := in.do(t, "POST", route, master, body, "X-Tollgate-User-Path", path)
		raw, _ := io.ReadAll(res.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return res.StatusCode, m, res.Header.Get("X-Tollgate-Rule")
	}
	const secrets = `{"session":{"type":"realtime","model":"gpt-realtime"}}`
	s, first, _ := mint(a, "/rt/alice", "/v1/realtime/client_secrets", secrets)
	if s != 200 || !strings.HasPrefix(first["value"].(string), "ek_mock_") {
		t.Fatalf("mint: %d %v", s, first)
	}
	id := first["session"].(map[string]any)["id"].(string)
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
