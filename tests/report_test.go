package tests

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/admin/adminapi"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// reportConfig: /rep may send 5 requests and 100,000 tokens a minute and
// spend $1 a day; gpt-4o's output costs $30 a million tokens, its input
// nothing. A chat with max_tokens 100 reserves its prompt and 100 output
// tokens ($0.003); the mock answers with that prompt and 16 tokens
// ($0.00048): each strands 84 tokens and $0.00252 until it is settled.
const reportConfig = `
prices:
  gpt-4o: {input: 0, output: 30}
rate_limits:
  user_paths:
    - path: /rep
      limits: [{period: minute, max_requests: 5, max_tokens: 100000}]
budgets:
  user_paths:
    - {path: /rep, amount_usd: 1, period: day}
`

// The review report on a scenario with known numbers: five chats of
// max_tokens 100 (and a sixth refused) strand 5 × 84 tokens on the rule
// and 5 × $0.00252 on the budget; its CSV opens in encoding/csv with the
// documented columns, and says the same as its JSON.
func TestReportStrandedQuota(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, reportConfig)})
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"what is stranded quota?"}],"max_tokens":100}`
	for i := range 6 {
		s, b := in.call(t, "POST", "/v1/chat/completions", master, body, "X-Tollgate-User-Path", "/rep")
		if want := map[bool]int{true: 200, false: 429}[i < 5]; s != want {
			t.Fatalf("chat %d: %d %s, want %d", i, s, b, want)
		}
	}
	in.app.EvaluateAlerts(context.Background(), true) // samples the rules' peak use, as the reconciler loop does
	in.app.FlushStats(context.Background())

	resp := in.do(t, "GET", "/admin/report?format=csv", master, "")
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/csv") {
		t.Fatalf("the CSV report: %d %s", resp.StatusCode, ct)
	}
	records, err := csv.NewReader(resp.Body).ReadAll()
	if err != nil {
		t.Fatalf("the CSV report does not parse: %v", err)
	}
	if !slices.Equal(records[0], adminapi.ReportColumns) {
		t.Fatalf("columns %v, want %v", records[0], adminapi.ReportColumns)
	}
	rows := map[string]map[string]string{}
	for _, rec := range records[1:] {
		row := map[string]string{}
		for i, c := range adminapi.ReportColumns {
			row[c] = rec[i]
		}
		rows[rec[0]+" "+rec[1]+" "+rec[2]] = row
	}
	num := func(row map[string]string, col string) float64 {
		t.Helper()
		v, err := strconv.ParseFloat(row[col], 64)
		if err != nil {
			t.Fatalf("%s = %q in %v", col, row[col], row)
		}
		return v
	}
	rule := rows["rule user_path:/rep:minute tokens"]
	if rule == nil {
		t.Fatalf("no row for the rule's tokens: %v", records)
	}
	if got := num(rule, "stranded"); got != 5*84 {
		t.Errorf("the rule's stranded tokens: %v, want 420", got)
	}
	if r, u := num(rule, "reserved"), num(rule, "used"); r-u != 420 || u/r != num(rule, "estimate_error") {
		t.Errorf("the rule reserved %v and used %v, estimate error %v", r, u, num(rule, "estimate_error"))
	}
	if got := num(rule, "refusals"); got != 1 {
		t.Errorf("the rule's refusals: %v, want 1", got)
	}
	if got := num(rule, "peak_use"); got != 1 {
		t.Errorf("the rule's peak use: %v, want 1 (5 of 5 requests)", got)
	}
	budget := rows["rule budget:user_path:/rep:day usd"]
	if budget == nil {
		t.Fatalf("no row for the budget: %v", records)
	}
	if r, u, s := num(budget, "reserved"), num(budget, "used"), num(budget, "stranded"); r != 5*3000 || u != 5*480 || s != 5*2520 {
		t.Errorf("the budget reserved %v, used %v, stranded %v micro-dollars; want 15000, 2400, 12600", r, u, s)
	}
	mock := rows["provider mock "]
	if mock == nil || num(mock, "admitted") != 5 || num(mock, "upstream_429") != 0 || num(mock, "upstream_429_rate") != 0 {
		t.Errorf("the provider's row: %v", mock)
	}
	// The JSON report says the same.
	s, b := in.call(t, "GET", "/admin/report?from=24h", master, "")
	var rep struct {
		Rules []struct {
			Rule      string  `json:"rule"`
			Dimension string  `json:"dimension"`
			Stranded  float64 `json:"stranded"`
		} `json:"rules"`
		Providers []struct {
			Provider string  `json:"provider"`
			Admitted float64 `json:"admitted"`
		} `json:"providers"`
	}
	if s != 200 || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("the JSON report: %d %s", s, b)
	}
	i := slices.IndexFunc(rep.Rules, func(r struct {
		Rule      string  `json:"rule"`
		Dimension string  `json:"dimension"`
		Stranded  float64 `json:"stranded"`
	}) bool {
		return r.Rule == "user_path:/rep:minute" && r.Dimension == "tokens"
	})
	if i < 0 || rep.Rules[i].Stranded != 420 {
		t.Errorf("the JSON report's rules: %+v", rep.Rules)
	}
	for _, bad := range []string{"?format=xml", "?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "?from=2000h"} {
		if s, b := in.call(t, "GET", "/admin/report"+bad, master, ""); s != 400 {
			t.Errorf("GET /admin/report%s: %d %s, want 400", bad, s, b)
		}
	}
}
