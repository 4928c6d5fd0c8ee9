package tests

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// A pause set through one instance refuses on another within the
// rule-propagation bound (2 s, stepped, not slept), in each protocol's
// shape with the reason; lifting it takes effect the same way; a pause on
// the provider refuses everyone, one on a user path only that path.
func TestPauseReachesOtherInstances(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Now().Truncate(time.Minute).Add(time.Hour)
	a := newInstance(t, prefix, t0, nil)
	b := newInstance(t, prefix, t0, nil)
	if s := b.chat(t, master, "X-Tollgate-User-Path", "/team/app"); s != 200 {
		t.Fatalf("before the pause: %d", s)
	}
	s, body := a.call(t, "POST", "/admin/pause", master, `{"user_path":"/team","for":"10m","reason":"runaway agent, see INC-42"}`)
	if s != 201 || !strings.Contains(string(body), `"id":"pause:user_path:/team"`) {
		t.Fatalf("pause: %d %s", s, body)
	}
	if s, body := a.call(t, "POST", "/admin/pause", master, `{"user_path":"team","for":"soon","colour":"red"}`); s != 400 ||
		!strings.Contains(string(body), "user_path") || !strings.Contains(string(body), `"for"`) || !strings.Contains(string(body), "colour") {
		t.Fatalf("a bad pause: %d %s", s, body)
	}
	b.clock.Add(configstore.DefaultInterval / 2)
	if s := b.chat(t, master, "X-Tollgate-User-Path", "/team/app"); s != 200 {
		t.Fatalf("within the interval b has not looked yet: %d", s)
	}
	b.clock.Add(configstore.DefaultInterval / 2)
	res := b.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/team/app")
	raw, _ := io.ReadAll(res.Body)
	e := decodeOpenAIError(t, raw)
	if res.StatusCode != 503 || e.Code == nil || *e.Code != "paused" || !strings.Contains(e.Message, "runaway agent, see INC-42") ||
		res.Header.Get("X-Tollgate-Decision") != "paused" || res.Header.Get("X-Tollgate-Rule") != "pause:user_path:/team" ||
		res.Header.Get("Retry-After") != "598" { // set at t0 for 10m; b is 2 s on
		t.Fatalf("paused chat: %d %v %s", res.StatusCode, res.Header, raw)
	}
	res = b.do(t, "POST", "/v1/messages", master, `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		"X-Tollgate-User-Path", "/team/app")
	raw, _ = io.ReadAll(res.Body)
	if res.StatusCode != 503 || !strings.Contains(string(raw), `"type":"error"`) || !strings.Contains(string(raw), "INC-42") {
		t.Fatalf("paused in Anthropic's shape: %d %s", res.StatusCode, raw)
	}
	if s := b.chat(t, master, "X-Tollgate-User-Path", "/other"); s != 200 {
		t.Fatalf("another path is not paused: %d", s)
	}
	if s, body := a.call(t, "GET", "/admin/pauses", master, ""); s != 200 || !strings.Contains(string(body), `"active":true`) {
		t.Fatalf("list: %d %s", s, body)
	}

	// The provider: everyone, until lifted.
	if s, body := a.call(t, "POST", "/admin/pause", master, `{"provider":"mock","reason":"provider incident"}`); s != 201 {
		t.Fatalf("pause provider: %d %s", s, body)
	}
	b.clock.Add(configstore.DefaultInterval)
	res = b.do(t, "POST", "/v1/chat/completions", master, budgetChat, "X-Tollgate-User-Path", "/other")
	if res.StatusCode != 503 || res.Header.Get("X-Should-Retry") != "false" || res.Header.Get("X-Tollgate-Rule") != "pause:provider:mock" {
		t.Fatalf("paused provider: %d %v", res.StatusCode, res.Header)
	}
	for _, body := range []string{`{"provider":"mock"}`, `{"user_path":"/team"}`} {
		if s, b := a.call(t, "DELETE", "/admin/pause", master, body); s != 200 {
			t.Fatalf("lift %s: %d %s", body, s, b)
		}
	}
	if s, _ := a.call(t, "DELETE", "/admin/pause", master, `{"user_path":"/team"}`); s != 404 {
		t.Fatalf("lift twice: %d", s)
	}
	b.clock.Add(configstore.DefaultInterval)
	if s := b.chat(t, master, "X-Tollgate-User-Path", "/team/app"); s != 200 {
		t.Fatalf("after the lift: %d", s)
	}
}
