package tests

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// GET /admin/stats, on DynamoDB Local: refusals counted by one instance
// (written at most every 10 s, per minute) and the estimate error of a
// reconciler run are what another instance reads, in two store calls
// whatever the number of rules.
func TestAdminStatsFromTheStore(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Now().Truncate(time.Minute).Add(30 * time.Second)
	env := config.Env{"TOLLGATE_CONFIG": writeConfig(t, `
rate_limits:
  user_paths:
    - {path: /s, limits: [{period: minute, max_requests: 1}]}
    - {path: /t, limits: [{period: minute, max_requests: 2, max_tokens: 100000}]}
`)}
	a := newInstance(t, prefix, t0, env)
	b := newInstance(t, prefix, t0, env)
	for range 5 {
		a.chat(t, master, "X-Tollgate-User-Path", "/s/app")
	}
	for range 3 {
		a.chat(t, master, "X-Tollgate-User-Path", "/t")
	}
	a.app.FlushStats(context.Background())
	settle(t, a)
	st := b.app.Store.(*dynamostore.Store)
	before := st.Stats().RoundTrips
	s, body := b.call(t, "GET", "/admin/stats", master, "")
	calls := st.Stats().RoundTrips - before
	var out struct {
		Minutes       []string              `json:"minutes"`
		Refusals      map[string][]float64  `json:"refusals"`
		EstimateError map[string][]*float64 `json:"estimate_error"`
	}
	if s != 200 || json.Unmarshal(body, &out) != nil || len(out.Minutes) != 60 {
		t.Fatalf("stats: %d %s", s, body)
	}
	sum := func(v []float64) (n float64) {
		for _, x := range v {
			n += x
		}
		return n
	}
	if sum(out.Refusals["user_path:/s:minute"]) != 4 || sum(out.Refusals["user_path:/t:minute"]) != 1 {
		t.Fatalf("refusals %v", out.Refusals)
	}
	var ratio *float64
	for _, r := range out.EstimateError["chat"] {
		if r != nil {
			ratio = r
		}
	}
	if ratio == nil || *ratio <= 0 || *ratio > 1 {
		t.Fatalf("estimate error %v", out.EstimateError)
	}
	if calls > 2 {
		t.Fatalf("GET /admin/stats made %d store calls, want at most 2", calls)
	}
}
