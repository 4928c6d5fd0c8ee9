package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// stallConfig puts every store call a request can make on its path: a
// window and a concurrency rule on /team, a fair-share rule on the
// provider, a budget, learned reservations (no max_tokens), cooldowns
// (the DynamoDB store keeps them), Realtime sessions, stats. /free has no
// rule of its own: it meets only the provider's.
const stallConfig = `
rate_limits:
  user_paths:
    - path: /team
      limits:
        - {period: minute, max_requests: 1000, max_tokens: 1000000}
        - {period: concurrent, max_requests: 50}
  providers:
    - name: mock
      limits:
        - {period: minute, max_requests: 100000, fair_share: {by: user_path}}
budgets:
  user_paths:
    - {path: /team, amount_usd: 100, period: day}
gateway:
  reservation: adaptive
`

// TestStoreThatNeverAnswers stops the engine from answering mid-run (it
// accepts connections and never replies, as DynamoDB Local does under
// SIGSTOP): every request is answered within the store deadline's bound,
// in each failure mode, on every route that reads or writes the store
// (chat with and without rules, a managed key, /v1/usage, Realtime
// minting and ending). Closed answers 503 with nothing sent upstream;
// open admits. Once the engine answers again, so does the gateway.
func TestStoreThatNeverAnswers(t *testing.T) {
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) {
			prefix := dynamotest.Prefix(t)
			engine := startTCPProxy(t, strings.TrimPrefix(dynamotest.Endpoint(t), "http://"))
			t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://"+engine.Addr())
			const timeout = 300 * time.Millisecond
			in := newInstance(t, prefix, time.Now(), config.Env{
				"TOLLGATE_CONFIG": writeConfig(t, stallConfig), "TOLLGATE_STORE_FAILURE": mode,
				"TOLLGATE_STORE_TIMEOUT": timeout.String(),
			})
			s, body := in.call(t, "POST", "/admin/keys", master, `{"user_path":"/team/app"}`)
			if s != 201 {
				t.Fatalf("create key: %d %s", s, body)
			}
			var key struct{ Key string }
			_ = json.Unmarshal(body, &key)
			noCap := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			type call struct {
				name, method, path, key, body string
				hdr                           []string
				// stalled is the status while the store does not answer.
				stalled map[string]int
			}
			calls := []call{
				{"chat under rules", "POST", "/v1/chat/completions", master, noCap, []string{"X-Tollgate-User-Path", "/team/app"}, map[string]int{"closed": 503, "open": 200}},
				{"chat under the provider's rule only", "POST", "/v1/chat/completions", master, noCap, []string{"X-Tollgate-User-Path", "/free"}, map[string]int{"closed": 503, "open": 200}},
				{"chat with a managed key", "POST", "/v1/chat/completions", key.Key, noCap, nil, map[string]int{"closed": 503, "open": 200}},
				{"usage", "GET", "/v1/usage", master, "", []string{"X-Tollgate-User-Path", "/team/app"}, map[string]int{"closed": 503, "open": 503}},
				{"realtime mint", "POST", "/v1/realtime/client_secrets", master, `{"session":{"type":"realtime","model":"gpt-realtime"}}`,
					[]string{"X-Tollgate-User-Path", "/team/app"}, map[string]int{"closed": 503, "open": 200}},
				{"realtime end", "POST", "/v1/realtime/sessions/sess_unknown/end", master, "", []string{"X-Tollgate-User-Path", "/team/app"}, map[string]int{"closed": 503, "open": 503}},
			}
			for _, c := range calls {
				if c.name == "realtime end" {
					continue
				}
				if s, b := in.call(t, c.method, c.path, c.key, c.body, c.hdr...); s != 200 {
					t.Fatalf("%s with the engine answering: %d %s", c.name, s, b)
				}
			}

			engine.Stall()
			// A bound, not a measurement: the deadline of each store call
			// on the path, and slack for a loaded machine. Without
			// deadlines these requests wait as long as the stall lasts.
			bound := 6*timeout + 2*time.Second
			var wg sync.WaitGroup
			var mu sync.Mutex
			var problems []string
			for round := range 3 {
				for _, c := range calls {
					wg.Go(func() {
						start := time.Now()
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						status, err := statusOf(ctx, in.srv.URL, c.method, c.path, c.key, c.body, c.hdr...)
						took := time.Since(start)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err != nil:
							problems = append(problems, fmt.Sprintf("round %d, %s: %v after %v", round, c.name, err, took))
						case took > bound:
							problems = append(problems, fmt.Sprintf("round %d, %s: answered %d after %v, past the bound %v", round, c.name, status, took, bound))
						case status != c.stalled[mode]:
							problems = append(problems, fmt.Sprintf("round %d, %s: %d, want %d", round, c.name, status, c.stalled[mode]))
						}
					})
				}
				wg.Wait()
			}
			if len(problems) > 0 {
				t.Fatalf("with the store not answering (%s):\n%s", mode, strings.Join(problems, "\n"))
			}

			engine.Resume()
			deadline := time.Now().Add(10 * time.Second)
			for {
				s, _ := in.call(t, "POST", "/v1/chat/completions", master, noCap, "X-Tollgate-User-Path", "/team/app")
				if s == 200 && !in.app.Gateway.StoreStalled() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the engine came back: %d", s)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// statusOf makes one request and returns its status, reading the whole
// answer.
func statusOf(ctx context.Context, base, method, path, key, body string, hdr ...string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
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
		return 0, err
	}
	defer res.Body.Close()
	_, err = io.Copy(io.Discard, res.Body)
	return res.StatusCode, err
}
