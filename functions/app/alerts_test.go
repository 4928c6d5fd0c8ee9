package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/limiter"
)

// A local process on the embedded store, at a fixed instant: a budget
// spent to half its amount ten minutes into its day fires its 50 % alert
// and its forecast (at that rate it runs out twenty minutes in), once
// however often it is evaluated; once its counters are reset, both
// resolve, once. The webhook receives the two firings and the two
// resolutions, each with every field.
func TestAlertsFireAndResolve(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var got []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var d map[string]any
		_ = json.Unmarshal(b, &d)
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}))
	defer hook.Close()
	const budget = "budget:user_path:/team:day"
	cfg := `
prices:
  gpt-4o: {input: 0, output: 1000000}
budgets:
  user_paths:
    - {path: /team, amount_usd: 10, period: day}
alerts:
  rules: [{on: "` + budget + `", at: [0.5]}]
  forecast: true
  webhooks: [{url: "` + hook.URL + `", secret: s}]
`
	path := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(ctx, config.Env{"TOLLGATE_CONFIG": path}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// The clock is read by the stats' flush timer too: behind a mutex.
	var clockMu sync.Mutex
	now := time.Date(2026, 3, 2, 0, 10, 0, 0, time.UTC)
	a.Clock = func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		return now
	}
	if err := a.BuildGateway(); err != nil {
		t.Fatal(err)
	}
	// Five chats of one output token: $5 spent, once settled.
	for range 5 {
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Tollgate-User-Path", "/team")
		w := httptest.NewRecorder()
		a.Gateway.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("chat: %d %s", w.Code, w.Body)
		}
	}
	rc, err := a.NewReconciler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Run(ctx); err != nil {
		t.Fatal(err)
	}
	use := "use|" + budget + "|usd|0.5"
	forecast := "forecast|" + budget + "|usd|0"
	fired, resolved := a.EvaluateAlerts(ctx, true)
	slices.Sort(fired)
	if strings.Join(fired, " ") != forecast+" "+use || len(resolved) != 0 {
		t.Fatalf("fired %v resolved %v", fired, resolved)
	}
	for range 3 {
		clockMu.Lock()
		now = now.Add(time.Second)
		clockMu.Unlock()
		if fired, resolved := a.EvaluateAlerts(ctx, true); len(fired)+len(resolved) != 0 {
			t.Fatalf("evaluated again: fired %v resolved %v", fired, resolved)
		}
	}
	// New counters: nothing spent, nothing holds.
	if err := a.ConfigStore.Regenerate(ctx, []limiter.RuleKey{limiter.MakeRuleKey(limiter.ScopeUserPath, "/team", limiter.Budget{Calendar: limiter.CalendarDay})}); err != nil {
		t.Fatal(err)
	}
	if err := a.Watcher.Load(ctx); err != nil {
		t.Fatal(err)
	}
	fired, resolved = a.EvaluateAlerts(ctx, true)
	slices.Sort(resolved)
	if len(fired) != 0 || strings.Join(resolved, " ") != forecast+" "+use {
		t.Fatalf("after the reset: fired %v resolved %v", fired, resolved)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !a.DrainAlerts(dctx) {
		t.Fatal("deliveries not drained")
	}
	mu.Lock()
	defer mu.Unlock()
	// Deliveries run four at a time, unordered: a receiver orders them by
	// fired_at and resolved_at.
	status := map[string][]string{}
	for _, d := range got {
		status[d["id"].(string)] = append(status[d["id"].(string)], d["status"].(string))
	}
	slices.Sort(status[use])
	slices.Sort(status[forecast])
	if strings.Join(status[use], ",") != "firing,resolved" || strings.Join(status[forecast], ",") != "firing,resolved" {
		t.Fatalf("deliveries %v", status)
	}
	for _, d := range got {
		if d["id"] == forecast && d["status"] == "firing" {
			if d["exhausts_at"] != "2026-03-02T00:20:00Z" || !strings.Contains(d["text"].(string), "will run out at 2026-03-02T00:20:00Z") {
				t.Errorf("the forecast's delivery: %v", d)
			}
		}
		if d["id"] == use && d["status"] == "firing" && (d["used"] != 5e6 || d["limit"] != 1e7 || d["period"] != "2026-03-02T00:00:00Z") {
			t.Errorf("the use alert's delivery: %v", d)
		}
	}
}
