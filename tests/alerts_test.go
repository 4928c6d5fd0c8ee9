package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/infra/notify"
)

// alertReceiver is a webhook that keeps what it accepted, checks each
// body's signature, and answers 500 to its first failFirst requests.
type alertReceiver struct {
	*httptest.Server
	secret    string
	failFirst int32
	calls     atomic.Int32
	mu        sync.Mutex
	got       []map[string]any
	badSig    atomic.Int32
}

func newAlertReceiver(t *testing.T, secret string, failFirst int32) *alertReceiver {
	t.Helper()
	rc := &alertReceiver{secret: secret, failFirst: failFirst}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !notify.Verify(rc.secret, b, r.Header.Get(notify.SignatureHeader)) {
			rc.badSig.Add(1)
		}
		if rc.calls.Add(1) <= rc.failFirst {
			w.WriteHeader(500)
			return
		}
		var doc map[string]any
		_ = json.Unmarshal(b, &doc)
		rc.mu.Lock()
		rc.got = append(rc.got, doc)
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	return rc
}

// firing counts the firing deliveries accepted, by alert id.
func (rc *alertReceiver) firing() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string]int{}
	for _, d := range rc.got {
		if d["status"] == "firing" {
			out[fmt.Sprint(d["id"])]++
		}
	}
	return out
}

func (rc *alertReceiver) doc(id string) map[string]any {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, d := range rc.got {
		if d["id"] == id {
			return d
		}
	}
	return nil
}

// waitFor polls cond for a bounded time.
// awayFromMidnight waits, when UTC midnight is less than d away, until it
// has passed: a test that spends a daily budget in real time for up to d
// must not see the budget's day end halfway (it failed so once, run at
// 23:59:58 UTC).
func awayFromMidnight(t *testing.T, d time.Duration) {
	t.Helper()
	now := time.Now().UTC()
	midnight := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if wait := midnight.Sub(now); wait < d {
		t.Logf("waiting %s for UTC midnight to pass", wait.Round(time.Second))
		time.Sleep(wait + time.Second)
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chatCosting sends one chat that reserves, and costs, one output token.
func chatCosting(g gatewayProcess, path string) int {
	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"openai/a","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tollgate-User-Path", path)
	res, err := clientHTTP.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// Two gateway processes on DynamoDB Local evaluate the same alerts: a
// budget crossing 50 % and then 80 % is delivered exactly once for each
// threshold to each webhook, signed with its secret; a webhook that
// answers 500 twice gets the first alert once it answers 200; nothing is
// delivered twice however many evaluations follow, and both processes
// list the alerts as firing.
func TestAlertsFireOncePerThresholdAcrossTheFleet(t *testing.T) {
	t.Parallel()                       // waits in real time on its own processes, tables and ports; see docs/testing.md
	awayFromMidnight(t, 2*time.Minute) // its daily budget must not start again halfway
	prefix := dynamotest.Prefix(t)
	up := newCountingUpstream(t)
	ok := newAlertReceiver(t, "s3cret-a", 0)
	flaky := newAlertReceiver(t, "s3cret-b", 2)
	bin := buildFunction(t, "gateway")
	const budget = "budget:user_path:/team/a:day"
	// An output token costs $1 and the upstream answers with one: each
	// chat reserves $1 and spends $1.
	config := fmt.Sprintf(`
prices:
  a: {input: 0, output: 1000000}
budgets:
  user_paths:
    - {path: /team/a, amount_usd: 10, period: day}
alerts:
  every: 1s
  rules:
    - {on: %q, at: [0.5, 0.8, 1.0]}
  webhooks:
    - {url: %q, secret: s3cret-a}
    - {url: %q, secret: s3cret-b}
`, budget, ok.URL+"/hook", flaky.URL+"/hook")
	gws := startGateways(t, bin, 2, prefix, dynamotest.Endpoint(t), up.URL, config)
	spend := func(n int) {
		t.Helper()
		for i := range n {
			if s := chatCosting(gws[i%2], "/team/a"); s != 200 {
				t.Fatalf("chat %d: %d", i, s)
			}
			time.Sleep(300 * time.Millisecond) // a reservation settles before the next (1 s reconciler)
		}
	}
	id := func(at string) string { return "use|" + budget + "|usd|" + at }

	spend(5) // $5 of $10
	waitFor(t, "the 50 % alert at both webhooks", 30*time.Second, func() bool {
		return ok.firing()[id("0.5")] == 1 && flaky.firing()[id("0.5")] == 1
	})
	if flaky.calls.Load() < 3 {
		t.Errorf("the flaky webhook was called %d times, want its two 500s and then the delivery", flaky.calls.Load())
	}
	spend(3) // $8
	waitFor(t, "the 80 % alert at both webhooks", 30*time.Second, func() bool {
		return ok.firing()[id("0.8")] == 1 && flaky.firing()[id("0.8")] == 1
	})
	time.Sleep(4 * time.Second) // several more evaluations in each process
	for name, rc := range map[string]*alertReceiver{"the webhook": ok, "the flaky webhook": flaky} {
		got := rc.firing()
		if len(got) != 2 || got[id("0.5")] != 1 || got[id("0.8")] != 1 {
			t.Errorf("%s received %v, want one delivery for 0.5 and one for 0.8", name, got)
		}
		if n := rc.badSig.Load(); n != 0 {
			t.Errorf("%s: %d deliveries whose signature does not verify with the secret", name, n)
		}
	}
	d := ok.doc(id("0.8"))
	if d["kind"] != "use" || d["subject"] != budget || d["threshold"] != 0.8 || d["period"] == "" ||
		!strings.Contains(fmt.Sprint(d["text"]), "80 %") || d["source"] != "tollgate" || d["fired_at"] == nil {
		t.Errorf("the 80 %% delivery: %v", d)
	}
	// Each alert was fired by one process.
	fired := 0
	for _, g := range gws {
		b, _ := os.ReadFile(g.logs)
		fired += strings.Count(string(b), `"msg":"alert fired"`)
	}
	if fired != 2 {
		t.Errorf("%d alert fired lines in the two processes' logs, want 2", fired)
	}
	for i, g := range gws {
		res, err := http.Get(g.url + "/admin/alerts")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Active []map[string]any `json:"active"`
		}
		_ = json.NewDecoder(res.Body).Decode(&list)
		res.Body.Close()
		if len(list.Active) != 2 {
			t.Errorf("gateway %d lists %d alerts firing, want 2: %v", i, len(list.Active), list.Active)
		}
	}
}
