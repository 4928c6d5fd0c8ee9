package tests

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// Reservations learn, on DynamoDB Local: chats that set no max_tokens
// reserve the default 1,024 output tokens until the reconciler has seen
// 20 of them use 16; then they reserve the learned p95 (at least the
// 64-token floor), which /admin/explain shows; a request with a cap keeps
// it under the default "cap" mode. The estimate error of the route before
// and after is logged (and quoted in
// docs/design/shaping.md).
func TestReservationsLearn(t *testing.T) {
	t.Parallel() // waits in real time for its own stream records; see docs/testing.md
	prefix := dynamotest.Prefix(t)
	t0 := time.Now().Truncate(time.Hour).Add(time.Hour)
	in := newInstance(t, prefix, t0, config.Env{"TOLLGATE_CONFIG": writeConfig(t, `
rate_limits:
  user_paths:
    - path: /learn
      limits: [{period: hour, max_tokens: 10000000}]
`)})
	const uncapped = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	reserved := func(body string) int64 {
		t.Helper()
		before := remainingTokens(t, in, body)
		after := remainingTokens(t, in, body)
		return before - after // what the second request took at admission
	}
	run := func() *reconcile.RouteError {
		t.Helper()
		var chat reconcile.RouteError
		deadline := time.Now().Add(20 * time.Second)
		for {
			rep := in.reconcile(t)
			if e := rep.Routes["chat"]; e != nil {
				chat.Requests += e.Requests
				chat.Reserved += e.Reserved
				chat.Used += e.Used
			}
			if rep.Read == 0 && chat.Requests > 0 || time.Now().After(deadline) {
				return &chat
			}
		}
	}
	if r := reserved(uncapped); r < 1024 {
		t.Fatalf("before learning an uncapped chat reserves %d, want the default 1,024 and its prompt", r)
	}
	for range 20 {
		if s := in.chat(t, master, "X-Tollgate-User-Path", "/learn"); s != 200 {
			t.Fatal(s)
		}
	}
	for range 20 {
		res := in.do(t, "POST", "/v1/chat/completions", master, uncapped, "X-Tollgate-User-Path", "/learn")
		if res.StatusCode != 200 {
			t.Fatal(res.StatusCode)
		}
	}
	before := run()
	in.clock.Add(2 * time.Minute) // past the estimates' cache
	r := reserved(uncapped)
	if r >= 1024 || r < 64 {
		t.Fatalf("after learning an uncapped chat reserves %d; want the learned p95 (16 tokens) raised to the 64 floor, plus its prompt", r)
	}
	if capped := reserved(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":500}`); capped < 500 {
		t.Fatalf("a capped chat reserves %d, want its cap of 500 in cap mode", capped)
	}
	for range 20 {
		in.do(t, "POST", "/v1/chat/completions", master, uncapped, "X-Tollgate-User-Path", "/learn")
	}
	after := run()
	t.Logf("chat estimate error: before learning used/reserved %.3f over %d requests; after %.3f over %d",
		before.Ratio(), before.Requests, after.Ratio(), after.Requests)
	if after.Ratio() <= before.Ratio() {
		t.Fatalf("learning did not bring the reservations closer: %.3f then %.3f", before.Ratio(), after.Ratio())
	}

	s, body := in.call(t, "POST", "/admin/explain", master, `{"user_path":"/learn","provider":"mock","model":"gpt-4o"}`)
	var ex struct {
		Learned *struct {
			P95     int64 `json:"output_tokens_p95"`
			Samples int64 `json:"samples"`
			Reserve int64 `json:"reserves_without_a_cap"`
		} `json:"learned_estimate"`
	}
	if s != 200 || json.Unmarshal(body, &ex) != nil || ex.Learned == nil || ex.Learned.P95 < 16 || ex.Learned.P95 > 20 ||
		ex.Learned.Samples < 20 || ex.Learned.Reserve != 64 {
		t.Fatalf("explain: %d %s", s, body)
	}
}

// remainingTokens sends body for /learn and returns the token headroom the
// answer reports.
func remainingTokens(t *testing.T, in *instance, body string) int64 {
	t.Helper()
	res := in.do(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/learn")
	n, err := strconv.ParseInt(res.Header.Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
	if res.StatusCode != 200 || err != nil {
		t.Fatalf("chat: %d, remaining %q", res.StatusCode, res.Header.Get("X-Ratelimit-Remaining-Tokens"))
	}
	return n
}
