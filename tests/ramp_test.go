package tests

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// A ramped provider rule on DynamoDB Local, two instances, stepped
// clocks: the limit starts at 2 a minute and grows by 2 every 5 minutes,
// one step for the whole fleet; an upstream 429 during an interval holds
// it at its level for another interval.
func TestRampGrowsAndHoldsOn429s(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	var limited atomic.Bool
	ok := replay(t, "openai_chat.json", 200)
	tooMany := replay(t, "openai_error_429.json", 429, "Retry-After", "1")
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if limited.Load() {
			tooMany(w, r)
			return
		}
		ok(w, r)
	})
	env := config.Env{
		"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": up.URL + "/v1",
		"TOLLGATE_CONFIG": writeConfig(t, `
rate_limits:
  providers:
    - name: openai
      limits:
        - {period: minute, max_requests: 6, ramp: {start: 2, step: 2, every: 5m}}
`),
	}
	t0 := time.Now().Truncate(time.Hour).Add(time.Hour)
	a := newInstance(t, prefix, t0, env)
	b := newInstance(t, prefix, t0, env)
	step := func(d time.Duration) {
		a.clock.Add(d)
		b.clock.Add(d)
	}
	// admitted sends n chats a second apart through alternate instances and
	// counts the 200s.
	admitted := func(n int) int {
		got := 0
		for i := range n {
			in := []*instance{a, b}[i%2]
			if in.chat(t, master, "X-Tollgate-User-Path", "/ramp") == 200 {
				got++
			}
			step(time.Second)
		}
		return got
	}
	limit := func(want int, when string) {
		t.Helper()
		step(2 * time.Minute) // a fresh window: two minutes on, the old one weighs nothing
		step(configstore.DefaultInterval)
		if got := admitted(8); got != want {
			t.Fatalf("%s: %d of 8 admitted in a minute, want the ramp's %d", when, got, want)
		}
	}
	limit(2, "at the start")
	step(5 * time.Minute)
	limit(4, "after one interval")

	// 429s in the next interval: it holds at 4 for another interval.
	limited.Store(true)
	step(time.Minute)
	if s := a.chat(t, master, "X-Tollgate-User-Path", "/ramp"); s != 429 {
		t.Fatalf("the upstream's 429 reaches the client: %d", s)
	}
	limited.Store(false)
	step(5 * time.Minute)
	limit(4, "after an interval with 429s")
	step(5 * time.Minute)
	limit(6, "after a healthy interval again")
	step(10 * time.Minute)
	limit(6, "at its maximum")
}
