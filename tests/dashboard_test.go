package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/functions/admin/adminui"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// dashboardConfig is the configuration the dashboard tests run: a rule of
// each shape, so the page draws each kind of bar.
const dashboardConfig = `
providers:
  - {name: mock, type: mock, models: [gpt-4o, gpt-4o-mini]}
rate_limits:
  user_paths:
    - path: /
      limits: [{period: minute, max_requests: 1000, max_tokens: 500000}]
    - path: /demo
      limits:
        - {capacity: 3, refill_per_second: 0.2}
        - {period: concurrent, max_requests: 2}
  providers:
    - name: mock
      limits: [{period: minute, max_requests: 2000}]
migrations:
  - {name: mini, from: mock/gpt-4o, to: mock/gpt-4o-mini, scope: /mig, share: {start: 25, step: 25, every: 1h, max: 100}}
`

// The calls the page makes on each refresh (app.js: refresh): the live
// overview always, the charts' stats every third time, and the data of
// the tab in sight: the keys, the providers, the migrations, the alerts
// or the audit trail.
var dashboardCalls = []string{"/admin/overview", "/admin/stats", "/admin/keys", "/admin/providers", "/admin/migrations", "/admin/alerts", "/admin/audit?since=168h&limit=50"}

// dashboardTabCalls are the calls of the tabs that read their own data.
var dashboardTabCalls = dashboardCalls[2:]

// Every data call the page makes needs the master key: without one it is
// 401, with a managed key 403. The page itself carries no data and is
// served to anyone, with a strict Content-Security-Policy.
func TestDashboardAccess(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, dashboardConfig)})
	s, body := in.call(t, "POST", "/admin/keys", master, `{"user_path":"/team"}`)
	var made struct {
		Key string `json:"key"`
	}
	if s != 201 || json.Unmarshal(body, &made) != nil {
		t.Fatalf("create key: %d %s", s, body)
	}
	calls := append([]string{"/admin/rate-limits", "/admin/budgets", "/admin/pauses"}, dashboardCalls...)
	for _, path := range calls {
		for _, c := range []struct {
			key  string
			want int
		}{{"", 401}, {"sk-not-a-key", 401}, {made.Key, 403}, {master, 200}} {
			if s, body := in.call(t, "GET", path, c.key, ""); s != c.want {
				t.Errorf("GET %s with key %q: %d %s, want %d", path, c.key, s, body, c.want)
			}
		}
	}
	// The writes the page makes are refused alike.
	for _, w := range [][2]string{
		{"POST", "/admin/rate-limits"}, {"PATCH", "/admin/rate-limits/user_path:/x:minute"}, {"DELETE", "/admin/rate-limits/user_path:/x:minute"},
		{"POST", "/admin/rate-limits/reset-one"}, {"POST", "/admin/budgets"}, {"POST", "/admin/keys"}, {"DELETE", "/admin/keys/k1"},
	} {
		if s, _ := in.call(t, w[0], w[1], "", `{}`); s != 401 {
			t.Errorf("%s %s without a key: %d, want 401", w[0], w[1], s)
		}
		if s, _ := in.call(t, w[0], w[1], made.Key, `{}`); s != 403 {
			t.Errorf("%s %s with a managed key: %d, want 403", w[0], w[1], s)
		}
	}
	for _, path := range []string{"/admin/ui", "/admin/ui/app.js", "/admin/ui/app.css"} {
		resp := in.do(t, "GET", path, "", "")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != adminui.CSP {
			t.Errorf("GET %s: Content-Security-Policy %q", path, got)
		}
		for _, want := range []string{"script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
			if !strings.Contains(resp.Header.Get("Content-Security-Policy"), want) {
				t.Errorf("the policy lacks %s", want)
			}
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: headers %v", path, resp.Header)
		}
	}
	// Nothing in the page's files puts the key anywhere but sessionStorage.
	js := readAsset(t, "app.js")
	for _, banned := range []string{"localStorage", "document.cookie", "console.", "innerHTML", "eval(", "new Function"} {
		if strings.Contains(js, banned) {
			t.Errorf("app.js uses %s", banned)
		}
	}
	html := readAsset(t, "index.html")
	for _, banned := range []string{"<script>", "style=", "onclick", "http://", "https://"} {
		if strings.Contains(html, banned) {
			t.Errorf("index.html has %q: the policy would block it, or it loads from elsewhere", banned)
		}
	}
}

func readAsset(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "functions", "admin", "adminui", "assets", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A refresh of the page costs at most one store read per rule: it reads
// the configuration's version (not the snapshot, when nothing changed)
// and every rule's counters in one batch, whatever the number of rules.
// Counted with the stores' own counters, on DynamoDB Local, over ten
// refreshes of the page's calls, for 6 rules and for 46.
func TestDashboardRefreshCost(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, dashboardConfig)})
	if s, body := in.call(t, "POST", "/admin/budgets", master, `{"user_path":"/demo","period":"day","amount_usd":"5"}`); s != 201 {
		t.Fatalf("budget: %d %s", s, body)
	}
	if s, body := in.call(t, "POST", "/admin/rate-limits", master, `{"user_path":"/ui","limit_key":{"period":"minute"},"max_requests":5}`); s != 201 {
		t.Fatalf("rule: %d %s", s, body)
	}
	for range 3 {
		in.chat(t, master, "X-Tollgate-User-Path", "/demo")
	}
	counters := in.app.Store.(*dynamostore.Store)
	cfg := in.app.ConfigStore.(*configstore.Dynamo)
	measure := func(rules int) {
		t.Helper()
		const refreshes = 10
		// One tab in sight at a time: the overview, the stats every third
		// refresh, and that tab's own read.
		for _, tab := range append([]string{""}, dashboardTabCalls...) {
			before, rruBefore := counters.Stats().RoundTrips+cfg.RoundTrips(), counters.Stats().BilledRRU()
			for i := range refreshes {
				in.clock.Add(time.Second) // time moves between refreshes, as it does for the page
				paths := []string{"/admin/overview"}
				if i%3 == 0 { // stats every third refresh, as app.js reads them
					paths = append(paths, "/admin/stats")
				}
				if tab != "" {
					paths = append(paths, tab)
				}
				for _, path := range paths {
					if s, body := in.call(t, "GET", path, master, ""); s != 200 {
						t.Fatalf("GET %s: %d %s", path, s, body)
					}
				}
			}
			calls := counters.Stats().RoundTrips + cfg.RoundTrips() - before
			perRefresh := float64(calls) / refreshes
			// Read units as AWS bills them, for the counters table (the
			// configuration's reads are a unit or two each).
			rru := (counters.Stats().BilledRRU() - rruBefore) / refreshes
			t.Logf("%d rules, tab %q: %d store calls in %d refreshes (%.1f a refresh; %.1f read units of the counters table a refresh)", rules, tab, calls, refreshes, perRefresh, rru)
			if perRefresh > float64(rules) {
				t.Errorf("%d rules, tab %q: %.1f store calls a refresh, want at most one per rule", rules, tab, perRefresh)
			}
		}
	}
	// The configuration's rules (4 with usage) plus the rule and budget made
	// above.
	in.call(t, "GET", "/admin/overview", master, "") // the snapshot after the writes above is read once
	measure(6)
	for i := range 40 {
		if s, body := in.call(t, "POST", "/admin/rate-limits", master,
			fmt.Sprintf(`{"user_path":"/many/%d","limit_key":{"period":"minute"},"max_requests":10,"max_tokens":1000}`, i)); s != 201 {
			t.Fatalf("rule: %d %s", s, body)
		}
	}
	in.call(t, "GET", "/admin/overview", master, "")
	measure(46)
}

// browser is a headless Chromium the test drives; every JavaScript
// exception, console message and browser-reported error (a policy
// violation among them) is kept, to fail the test.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
	console  []string
	shots    string
}

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TOLLGATE_REQUIRE_BROWSER") != "" {
		t.Fatal("TOLLGATE_REQUIRE_BROWSER is set but no chromium is installed (make deps installs it)")
	}
	t.Skip("no chromium: make deps installs it")
	return ""
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx, shots: artefactDir(t)}
	dialogs := make(chan struct{}, 8)
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.console = append(b.console, string(e.Type)+": "+strings.Join(args, " "))
		case *cdplog.EventEntryAdded:
			// The API's refusals the page shows (401, 403, 409) are
			// reported as failed loads; a server error is a problem.
			expected := e.Entry.Source == cdplog.EntrySourceNetwork && !strings.Contains(e.Entry.Text, "status of 5")
			if e.Entry.Level == cdplog.EntryLevelError && !expected {
				b.problems = append(b.problems, "browser: "+e.Entry.Text+" "+e.Entry.URL)
			}
		case *page.EventJavascriptDialogOpening:
			select {
			case dialogs <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// The page asks before deleting, resetting or revoking: yes. (A
	// listener may not send commands, so another goroutine answers.)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-dialogs:
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}
		}
	}()
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// artefactDir is where screenshots go: $TOLLGATE_ARTIFACTS, else a
// directory under the system's temporary one.
func artefactDir(t *testing.T) string {
	dir := os.Getenv("TOLLGATE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "tollgate-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// step is one bounded browser action.
func (b *browser) step(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b.check(t, what)
}

func (b *browser) check(t *testing.T, what string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		t.Fatalf("after %s, the page reported: %s", what, strings.Join(b.problems, "; "))
	}
}

// until waits (a bounded time) for a JavaScript expression to be true.
func (b *browser) until(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(40*time.Second), chromedp.WithPollingInterval(200*time.Millisecond))); err != nil {
		b.check(t, "waiting for "+what)
		if png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(filepath.Join(b.shots, "failed.png"), png, 0o644)
		}
		t.Fatalf("waiting for %s: %v (the page as it was: failed.png in %s)", what, err, b.shots)
	}
	b.check(t, what)
}

// shot saves a screenshot of the whole page as an artefact and, with
// TOLLGATE_UPDATE_SCREENSHOTS set, as the documentation's copy in
// docs/screenshots/.
func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("TOLLGATE_UPDATE_SCREENSHOTS") != "" {
		if err := os.WriteFile(filepath.Join("..", "docs", "screenshots", name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// eval evaluates a JavaScript expression into a T.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	b.check(t, "evaluate "+expr)
	return v
}

// rowSel selects a rule's row in a table.
func rowSel(table, id string) string { return fmt.Sprintf(`#%s tr[data-rule=%q]`, table, id) }

// barUsed is the expression for a bar's used amount (-1 when absent).
func barUsed(table, id, dim string) string {
	return fmt.Sprintf(`(() => { const b = document.querySelector(%q); return b ? Number(b.dataset.used) : -1 })()`,
		rowSel(table, id)+fmt.Sprintf(` .bar[data-dim=%q]`, dim))
}

// The dashboard in headless Chromium (chromedp) against the whole stack on
// DynamoDB Local: a managed key refused at sign-in, the master key
// accepted; a rule created, traffic raising its bar to 3 of 5, the limit
// reached and its 2 refusals counted on the row and in the chart; a stale
// edit refused with 409 and saved on the current version; a reset dropping
// the bar to 0; a budget charged; the rules of the mock provider; a key
// created, used, revoked and then refused; a migration's share seen and
// rolled back from the page, the gateway then sending its scope to the
// old model; the estimate error drawn once
// the reconciler settled; a hidden tab reading nothing for 4 s, then
// reading again once shown. Every JavaScript exception, every error the
// browser reports (a CSP violation would be one) and any console output
// fails the test; at the end the key is in sessionStorage and nowhere else
// (not the URL, other storage, cookies, the console or the gateway's
// logs). Its screenshots are docs/operations/dashboard.md's.
func TestDashboardInBrowser(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, dashboardConfig)})
	b := newBrowser(t)
	const rule = "user_path:/ui:minute"

	// Signing in with a managed key is refused, and says why.
	s, body := in.call(t, "POST", "/admin/keys", master, `{"user_path":"/other"}`)
	var managed struct {
		Key string `json:"key"`
	}
	if s != 201 || json.Unmarshal(body, &managed) != nil {
		t.Fatalf("key: %d %s", s, body)
	}
	b.step(t, "open the page", chromedp.Navigate(in.srv.URL+"/admin/ui"), chromedp.WaitVisible(chromedp.CSS(`#master-key`)))
	b.shot(t, "login")
	b.step(t, "sign in with a managed key", chromedp.SendKeys(chromedp.CSS(`#master-key`), managed.Key), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)))
	b.until(t, "the managed key refused", `!document.querySelector('#login-error').hidden && document.querySelector('#login-error').textContent.includes('managed key')`)

	b.step(t, "sign in", chromedp.SendKeys(chromedp.CSS(`#master-key`), master), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)))
	b.until(t, "the rules listed", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("limits", "user_path:/:minute")))
	configRO := eval[bool](t, b, fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r.textContent.includes('read-only') && !r.querySelector('[data-action=edit]') && !r.querySelector('[data-action=delete]') })()`,
		rowSel("limits", "user_path:/:minute")))
	if !configRO {
		t.Error("a config rule is not marked read-only, or can be edited or deleted")
	}

	// Create a rule of 5 requests a minute.
	b.step(t, "create a rule",
		chromedp.Click(chromedp.CSS(`#new-rule`)),
		chromedp.SendKeys(chromedp.CSS(`#rule-form [name=subject]`), "/ui"),
		chromedp.SendKeys(chromedp.CSS(`#rule-form [name=max_requests]`), "5"),
		chromedp.Click(chromedp.CSS(`#rule-form button[type=submit]`)))
	b.until(t, "the new rule listed", barUsed("limits", rule, "requests")+` === 0`)

	// Traffic raises its bar.
	for range 3 {
		if s := in.chat(t, master, "X-Tollgate-User-Path", "/ui"); s != 200 {
			t.Fatalf("chat: %d", s)
		}
	}
	b.until(t, "the bar at 3", barUsed("limits", rule, "requests")+` === 3`)
	b.shot(t, "rate-limits")

	// The limit holds, and its refusals are counted on the row.
	refused := 0
	for range 4 {
		if in.chat(t, master, "X-Tollgate-User-Path", "/ui") == 429 {
			refused++
		}
	}
	if refused != 2 {
		t.Fatalf("%d refused of 4 over a limit of 5 with 3 used, want 2", refused)
	}
	in.app.FlushStats(context.Background()) // as the process does within 10 s
	b.until(t, "the bar full", fmt.Sprintf(`%s === 5 && document.querySelector(%q).classList.contains('full')`,
		barUsed("limits", rule, "requests"), rowSel("limits", rule)+` .bar[data-dim="requests"]`))
	b.until(t, "the refusals counted", fmt.Sprintf(`document.querySelector(%q).textContent === '2'`, rowSel("limits", rule)+` td.refused`))
	b.shot(t, "limit-reached")

	// An edit from a stale version is refused, and the page says so.
	b.step(t, "open the editor", chromedp.Click(chromedp.CSS(rowSel("limits", rule)+` [data-action=edit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#rule-form`)))
	if s, body := in.call(t, "PATCH", "/admin/rate-limits/"+rule, master, `{"max_requests":8}`); s != 200 {
		t.Fatalf("concurrent edit: %d %s", s, body)
	}
	b.step(t, "save the stale edit",
		chromedp.SetValue(chromedp.CSS(`#rule-form [name=max_requests]`), "10"),
		chromedp.Click(chromedp.CSS(`#rule-form button[type=submit]`)))
	b.until(t, "the conflict shown", `!document.querySelector('#rule-conflict').hidden && document.querySelector('#rule-conflict').textContent.includes('409')`)
	b.shot(t, "conflict")
	b.step(t, "load the current version", chromedp.Click(chromedp.CSS(`#rule-conflict [data-action=load-current]`)))
	formLimit := eval[string](t, b, `document.querySelector('#rule-form [name=max_requests]').value + ' v' + document.querySelector('#rule-version').textContent`)
	if formLimit != "8 v2" {
		t.Errorf("after loading the current version the form shows %q, want 8 v2", formLimit)
	}
	b.step(t, "save on the current version",
		chromedp.SetValue(chromedp.CSS(`#rule-form [name=max_requests]`), "10"),
		chromedp.Click(chromedp.CSS(`#rule-form button[type=submit]`)))
	b.until(t, "the edit saved", fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r && r.dataset.version === '3' && %s === 5 })()`,
		rowSel("limits", rule), barUsed("limits", rule, "requests")))

	// Reset starts new counters: the bar drops.
	b.step(t, "reset", chromedp.Click(chromedp.CSS(rowSel("limits", rule)+` [data-action=reset]`)))
	b.until(t, "the bar dropped", barUsed("limits", rule, "requests")+` === 0`)

	// A budget, with its dollars.
	b.step(t, "create a budget",
		chromedp.Click(chromedp.CSS(`#tabs [data-tab=budgets]`)),
		chromedp.Click(chromedp.CSS(`#new-budget`)),
		chromedp.SendKeys(chromedp.CSS(`#budget-form [name=subject]`), "/ui"),
		chromedp.SendKeys(chromedp.CSS(`#budget-form [name=amount_usd]`), "0.50"),
		chromedp.Click(chromedp.CSS(`#budget-form button[type=submit]`)))
	b.until(t, "the budget listed", barUsed("budgets", "budget:user_path:/ui:day", "dollars")+` === 0`)
	if s := in.chat(t, master, "X-Tollgate-User-Path", "/ui"); s != 200 {
		t.Fatalf("chat: %d", s)
	}
	b.until(t, "the budget charged", barUsed("budgets", "budget:user_path:/ui:day", "dollars")+` > 0`)
	b.shot(t, "budgets")

	// The rules that apply to the mock provider, and to one model.
	if s, body := in.call(t, "POST", "/admin/rate-limits", master, `{"scope":"model","subject":"gpt-4o","limit_key":{"period":"minute"},"max_tokens":90000}`); s != 201 {
		t.Fatalf("model rule: %d %s", s, body)
	}
	b.step(t, "by provider", chromedp.Click(chromedp.CSS(`#tabs [data-tab=applies]`)))
	b.until(t, "the provider's rules", fmt.Sprintf(`!!document.querySelector(%q) && !!document.querySelector(%q) && !!document.querySelector(%q) && !!document.querySelector(%q)`,
		rowSel("applies-always", "provider:mock:minute"), rowSel("applies-always", "user_path:/:minute"), rowSel("applies-caller", rule),
		rowSel("applies-caller", "model:gpt-4o:minute")))
	b.until(t, "what the provider's models can do", `(document.querySelector('#applies-capabilities tr[data-model="mock/gpt-4o"]')?.textContent || '').includes('128,000')`)
	b.shot(t, "by-provider")
	b.step(t, "by model", chromedp.SendKeys(chromedp.CSS(`#applies-model`), "gpt-4o"))
	b.until(t, "the model's rules", fmt.Sprintf(`!!document.querySelector(%q) && !!document.querySelector(%q) && !document.querySelector(%q)`,
		rowSel("applies-always", "model:gpt-4o:minute"), rowSel("applies-always", "provider:mock:minute"), rowSel("applies-always", "model:gpt-4o-mini:minute")))
	b.step(t, "another model", chromedp.Clear(chromedp.CSS(`#applies-model`)), chromedp.SendKeys(chromedp.CSS(`#applies-model`), "gpt-4o-mini"))
	b.until(t, "not the other model's rule", fmt.Sprintf(`!document.querySelector(%q) && !document.querySelector(%q)`,
		rowSel("applies-always", "model:gpt-4o:minute"), rowSel("applies-caller", "model:gpt-4o:minute")))

	// A migration: a quarter of /mig's tenants on gpt-4o-mini, seen on the
	// page, then rolled back from it (after a confirmation): none then.
	migrated := func() int {
		n := 0
		for i := range 20 {
			res := in.do(t, "POST", "/v1/chat/completions", master, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`,
				"X-Tollgate-User-Path", fmt.Sprintf("/mig/t%02d", i))
			if res.StatusCode != 200 {
				t.Fatalf("chat: %d", res.StatusCode)
			}
			if res.Header.Get("X-Tollgate-Migration") == "mini" && res.Header.Get("X-Tollgate-Model") == "gpt-4o-mini" {
				n++
			}
		}
		return n
	}
	before := migrated()
	const migrationRow = `#migrations tr[data-migration="mini"]`
	b.step(t, "migrations", chromedp.Click(chromedp.CSS(`#tabs [data-tab=migrations]`)))
	b.until(t, "the migration's share", fmt.Sprintf(`(() => { const r = document.querySelector(%q); return !!r && r.dataset.state === 'running' &&
		r.querySelector('.bar[data-dim=share]').dataset.used === '25' && r.textContent.includes('started') && !!r.querySelector('[data-action=pause]') })()`, migrationRow))
	b.shot(t, "migrations")
	b.step(t, "roll back", chromedp.Click(chromedp.CSS(migrationRow+` [data-action=rollback]`)))
	b.until(t, "rolled back", fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r.dataset.state === 'rolled_back' &&
		r.querySelector('.bar[data-dim=share]').dataset.used === '0' && r.textContent.includes('rolled back: by master') && !!r.querySelector('[data-action=resume]') &&
		!r.querySelector('[data-action=rollback]') })()`, migrationRow))
	if after := migrated(); before == 0 || after != 0 {
		t.Fatalf("%d of 20 tenants of /mig migrated before the rollback, %d after; want some, then none", before, after)
	}
	t.Logf("%d of 20 tenants of /mig migrated at 25 %%, none after the rollback from the page", before)

	// A key: its secret shown once, then revoked.
	b.step(t, "create a key", chromedp.Click(chromedp.CSS(`#tabs [data-tab=keys]`)),
		chromedp.SendKeys(chromedp.CSS(`#key-form [name=name]`), "dashboard test"),
		chromedp.SendKeys(chromedp.CSS(`#key-form [name=user_path]`), "/ui/app"),
		chromedp.Click(chromedp.CSS(`#key-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#secret`)))
	secret := eval[string](t, b, `document.querySelector('#secret-value').textContent`)
	if s := in.chat(t, secret); s != 200 {
		t.Fatalf("the new key: %d", s)
	}
	b.until(t, "the key listed", `[...document.querySelectorAll('#keys tr[data-key]')].some(r => r.textContent.includes('dashboard test'))`)
	keyID := eval[string](t, b, `[...document.querySelectorAll('#keys tr[data-key]')].find(r => r.textContent.includes('dashboard test')).dataset.key`)
	b.shot(t, "keys")
	b.step(t, "stored", chromedp.Click(chromedp.CSS(`#secret-done`)))
	secretGone := eval[bool](t, b, `document.querySelector('#secret').hidden && document.querySelector('#secret-value').textContent === ''`)
	if !secretGone {
		t.Error("the secret is still on the page after it was stored")
	}
	b.step(t, "revoke", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#keys tr[data-key=%q] [data-action=revoke]`, keyID))))
	b.until(t, "the key revoked", fmt.Sprintf(`document.querySelector('#keys tr[data-key=%q]').textContent.includes('revoked')`, keyID))
	in.clock.Add(30 * time.Second) // past the gateway's cache of keys
	if s := in.chat(t, secret); s != 401 {
		t.Fatalf("the revoked key: %d, want 401", s)
	}

	// The charts: refusals by rule, and the estimate error of the chat
	// route once the reconciler has settled what was sent.
	settle(t, in)
	b.step(t, "charts", chromedp.Click(chromedp.CSS(`#tabs [data-tab=charts]`)))
	b.until(t, "the refusals chart", fmt.Sprintf(`document.querySelectorAll('#chart-refusals svg rect').length > 0 && !!document.querySelector('#chart-refusals [data-series=%q]')`, rule))
	b.until(t, "the estimate chart", `document.querySelectorAll('#chart-estimate svg circle').length > 0 && !!document.querySelector('#chart-estimate [data-series=chat]')`)
	b.shot(t, "charts")

	// The key is in sessionStorage and nowhere else: not in the URL, other
	// storage, cookies, the console, or the gateway's logs.
	where := eval[struct {
		Session string `json:"session"`
		Local   int    `json:"local"`
		Cookie  string `json:"cookie"`
		URL     string `json:"url"`
	}](t, b, `({session: sessionStorage.getItem('tollgate.masterKey'), local: localStorage.length, cookie: document.cookie, url: location.href})`)
	if where.Session != master || where.Local != 0 || where.Cookie != "" || strings.Contains(where.URL, master) {
		t.Errorf("the key's whereabouts: %+v", where)
	}
	b.mu.Lock()
	console := strings.Join(b.console, "\n")
	b.mu.Unlock()
	if console != "" {
		t.Errorf("the page wrote to the console:\n%s", console)
	}
	if strings.Contains(in.logs.String(), master) {
		t.Error("the master key is in the logs")
	}

	// Delete the rule: its row goes.
	b.step(t, "back to the rules", chromedp.Click(chromedp.CSS(`#tabs [data-tab=limits]`)),
		chromedp.Click(chromedp.CSS(rowSel("limits", rule)+` [data-action=delete]`)))
	b.until(t, "the rule deleted", fmt.Sprintf(`!document.querySelector(%q)`, rowSel("limits", rule)))
	if s, _ := in.call(t, "GET", "/admin/rate-limits/"+rule, master, ""); s != 404 {
		t.Fatalf("the deleted rule: %d, want 404", s)
	}

	// Out of sight the page stops reading; in sight again it reads at once.
	tick := func() int { return eval[int](t, b, `state.tick`) }
	eval[bool](t, b, `(() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => true}); document.dispatchEvent(new Event('visibilitychange')); return true })()`)
	time.Sleep(4 * time.Second) // the refresh under way ends, and no other is set
	hidden := tick()
	time.Sleep(4 * time.Second) // longer than a refresh interval
	if got := tick(); got != hidden {
		t.Fatalf("a hidden page read the API %d times in 4 s", got-hidden)
	}
	eval[bool](t, b, `(() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => false}); document.dispatchEvent(new Event('visibilitychange')); return true })()`)
	b.until(t, "reading again once shown", fmt.Sprintf(`state.tick > %d`, hidden))

	// Signing out forgets it.
	b.step(t, "sign out", chromedp.Click(chromedp.CSS(`#logout`)), chromedp.WaitVisible(chromedp.CSS(`#master-key`)))
	left := eval[int](t, b, `sessionStorage.length`)
	if left != 0 {
		t.Errorf("sessionStorage holds %d items after signing out", left)
	}
	b.check(t, "the whole session")
}

// settle runs the reconciler until it has settled chat requests (the
// stream records reach it with a delay), for a bounded time.
func settle(t *testing.T, in *instance) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); in.reconcile(t).Routes["chat"] == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the reconciler settled no chat request in 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reconcile runs one pass of the instance's reconciler.
func (in *instance) reconcile(t *testing.T) reconcile.Report {
	t.Helper()
	rc, err := in.app.NewReconciler(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The overview reads the configuration's version on every call, so a rule
// another instance made or changed is listed at once, not after the
// watcher's interval.
func TestOverviewSeesOtherInstancesAtOnce(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	t0 := time.Now()
	a := newInstance(t, prefix, t0, config.Env{})
	b := newInstance(t, prefix, t0, config.Env{})
	ids := func() []string {
		t.Helper()
		s, body := a.call(t, "GET", "/admin/overview", master, "")
		var out struct {
			RateLimits []struct {
				ID      string `json:"id"`
				Version int64  `json:"version"`
			} `json:"rate_limits"`
		}
		if s != 200 || json.Unmarshal(body, &out) != nil {
			t.Fatalf("overview: %d %s", s, body)
		}
		var ids []string
		for _, r := range out.RateLimits {
			ids = append(ids, fmt.Sprintf("%s v%d", r.ID, r.Version))
		}
		return ids
	}
	if got := ids(); len(got) != 0 {
		t.Fatalf("before: %v", got)
	}
	if s, body := b.call(t, "POST", "/admin/rate-limits", master, `{"user_path":"/x","limit_key":{"period":"minute"},"max_requests":5}`); s != 201 {
		t.Fatalf("create on b: %d %s", s, body)
	}
	if got := ids(); len(got) != 1 || got[0] != "user_path:/x:minute v1" {
		t.Fatalf("a's overview after b created a rule: %v", got)
	}
	if s, body := b.call(t, "PATCH", "/admin/rate-limits/user_path:/x:minute", master, `{"max_requests":6}`); s != 200 {
		t.Fatalf("patch on b: %d %s", s, body)
	}
	if got := ids(); len(got) != 1 || got[0] != "user_path:/x:minute v2" {
		t.Fatalf("a's overview after b changed it: %v", got)
	}
}

// A store that stops answering: the page's data calls answer 503 in the
// admin API's error shape, promptly, and the page itself still loads.
func TestDashboardCallsWhenTheStoreStops(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	engine := startTCPProxy(t, strings.TrimPrefix(dynamotest.Endpoint(t), "http://"))
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://"+engine.Addr())
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, dashboardConfig)})
	for _, path := range dashboardCalls {
		if s, body := in.call(t, "GET", path, master, ""); s != 200 {
			t.Fatalf("GET %s with the store up: %d %s", path, s, body)
		}
	}
	engine.Stop()
	for _, path := range dashboardCalls {
		start := time.Now()
		s, body := in.call(t, "GET", path, master, "")
		var e struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if s != 503 || json.Unmarshal(body, &e) != nil || e.Error.Type != "api_error" || e.Error.Message == "" {
			t.Errorf("GET %s with the store down: %d %s, want 503 api_error", path, s, body)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("GET %s with the store down took %v", path, d)
		}
	}
	if resp := in.do(t, "GET", "/admin/ui", "", ""); resp.StatusCode != 200 {
		t.Errorf("the page with the store down: %d", resp.StatusCode)
	}
}

// The dashboard's answers to seed 001's questions, its alerts and its
// audit trail, in headless Chromium against the whole stack on DynamoDB
// Local: top user paths, refusals by class and model, the bottleneck of
// a provider and the Retry-After distribution from real traffic; an alert
// fired by an evaluation; the audit entries of the writes made; then,
// signed in with a partner key, only its subtree, a rule made beneath it
// from the page, one outside it refused. No JavaScript error or policy
// violation anywhere.
func TestDashboardOperationsInBrowser(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	cfg := dashboardConfig + "alerts:\n  every: 1s\n  rules: [{on: any, at: [0.5]}]\n"
	in := newInstance(t, prefix, time.Now(), config.Env{"TOLLGATE_CONFIG": writeConfig(t, cfg)})
	b := newBrowser(t)
	const rule = "user_path:/ops:minute"
	for _, body := range []string{
		`{"user_path":"/ops","limit_key":{"period":"minute"},"max_requests":4}`,
		`{"scope":"model","subject":"gpt-4o","limit_key":{"period":"minute"},"max_requests":5}`,
	} {
		if s, b := in.call(t, "POST", "/admin/rate-limits", master, body); s != 201 {
			t.Fatalf("rule: %d %s", s, b)
		}
	}
	for i, c := range []struct {
		path string
		want int
	}{{"/ops", 200}, {"/ops", 200}, {"/ops", 200}, {"/x", 200}, {"/x", 200}, {"/x", 429}} {
		if s := in.chat(t, master, "X-Tollgate-User-Path", c.path, "X-Tollgate-Class", "interactive"); s != c.want {
			t.Fatalf("chat %d on %s: %d, want %d", i, c.path, s, c.want)
		}
	}
	in.app.FlushStats(context.Background())
	if fired, _ := in.app.EvaluateAlerts(context.Background(), true); len(fired) == 0 {
		t.Fatal("no alert fired")
	}

	b.step(t, "open the page", chromedp.Navigate(in.srv.URL+"/admin/ui"), chromedp.WaitVisible(chromedp.CSS(`#master-key`)))
	b.step(t, "sign in", chromedp.SendKeys(chromedp.CSS(`#master-key`), master), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)))
	b.until(t, "the rules listed", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("limits", rule)))

	b.step(t, "operations", chromedp.Click(chromedp.CSS(`#tabs [data-tab=ops]`)))
	b.until(t, "the top user paths", `(() => { const r = document.querySelector('#top-requests tr[data-path="/ops"]'); return !!r && r.textContent.includes('3') })()`)
	b.until(t, "refusals by class and model", `(() => { const r = document.querySelector('#outcomes tr[data-outcome=refused]'); return !!r && r.querySelector('.by-class').textContent.includes('interactive 1') && r.querySelector('.by-model').textContent.includes('gpt-4o 1') })()`)
	b.until(t, "the provider's bottleneck", `(() => { const r = document.querySelector('#bottlenecks tr[data-provider=mock]'); return !!r && r.textContent.includes('model:gpt-4o:minute') })()`)
	b.until(t, "the Retry-After distribution", `!!document.querySelector('#retry-after tr[data-provider=mock][data-limiter=local]')`)
	b.until(t, "the later outcomes listed", `!!document.querySelector('#outcomes tr[data-outcome=fallback]') && !!document.querySelector('#outcomes tr[data-outcome=downgraded]')`)
	b.until(t, "the store cost stated", `document.querySelector('#stats-cost').textContent.includes('BatchGetItem')`)
	b.shot(t, "operations")

	b.step(t, "alerts", chromedp.Click(chromedp.CSS(`#tabs [data-tab=alerts]`)))
	b.until(t, "the alert firing", fmt.Sprintf(`(() => { const r = document.querySelector('#alerts-active tr[data-alert=%q]'); return !!r && r.textContent.includes('75 %%') })()`, "use|"+rule+"|requests|0.5"))
	b.shot(t, "alerts")

	b.step(t, "audit", chromedp.Click(chromedp.CSS(`#tabs [data-tab=audit]`)))
	b.until(t, "the audit trail", fmt.Sprintf(`(() => { const r = document.querySelector('#audit tr[data-target=%q]'); return !!r && r.textContent.includes('master') && r.textContent.includes('POST /admin/rate-limits') })()`, rule))
	b.shot(t, "audit")

	// A partner key for /ops: its subtree only.
	partner := makeKey(t, in, master, `{"user_path":"/ops","admin":true}`)
	b.step(t, "sign out", chromedp.Click(chromedp.CSS(`#logout`)), chromedp.WaitVisible(chromedp.CSS(`#master-key`)))
	b.step(t, "sign in as the partner", chromedp.SendKeys(chromedp.CSS(`#master-key`), partner.Key), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)))
	b.until(t, "the partner's rules", fmt.Sprintf(`!!document.querySelector(%q) && !document.querySelector(%q) && document.querySelector('#tabs [data-tab=applies]').hidden && document.querySelector('#who').textContent.includes('/ops')`,
		rowSel("limits", rule), rowSel("limits", "user_path:/:minute")))
	b.step(t, "a rule beneath it",
		chromedp.Click(chromedp.CSS(`#tabs [data-tab=limits]`)),
		chromedp.Click(chromedp.CSS(`#new-rule`)),
		chromedp.SendKeys(chromedp.CSS(`#rule-form [name=subject]`), "/ops/app"),
		chromedp.SendKeys(chromedp.CSS(`#rule-form [name=max_requests]`), "2"),
		chromedp.Click(chromedp.CSS(`#rule-form button[type=submit]`)))
	b.until(t, "the partner's new rule", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("limits", "user_path:/ops/app:minute")))
	b.step(t, "a rule outside it",
		chromedp.Click(chromedp.CSS(`#new-rule`)),
		chromedp.SendKeys(chromedp.CSS(`#rule-form [name=subject]`), "/elsewhere"),
		chromedp.SendKeys(chromedp.CSS(`#rule-form [name=max_requests]`), "2"),
		chromedp.Click(chromedp.CSS(`#rule-form button[type=submit]`)))
	b.until(t, "the refusal shown", `!document.querySelector('#rule-error').hidden && document.querySelector('#rule-error').textContent.includes('403')`)
	b.step(t, "cancel", chromedp.Click(chromedp.CSS(`#rule-form [data-cancel]`)))
	b.step(t, "the partner's audit", chromedp.Click(chromedp.CSS(`#tabs [data-tab=audit]`)))
	b.until(t, "the partner's write listed", fmt.Sprintf(`(() => { const r = document.querySelector('#audit tr[data-target="user_path:/ops/app:minute"]'); return !!r && r.textContent.includes(%q) })()`, partner.ID))
	b.shot(t, "partner")
	b.mu.Lock()
	console := strings.Join(b.console, "\n")
	b.mu.Unlock()
	if console != "" {
		t.Errorf("the page wrote to the console:\n%s", console)
	}
	b.check(t, "the whole session")
}
