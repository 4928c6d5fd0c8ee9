package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// A batch submitted through the gateway is followed to its end and what
// it used is charged once, at the batch price, to its submitter's token
// window and budget, whatever the number of reconcilers.
func TestBatchChargedOnceWhenItEnds(t *testing.T) {
	var status atomic.Value
	status.Store("in_progress")
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/batches":
			_, _ = io.WriteString(w, `{"id":"batch_1","object":"batch","endpoint":"/v1/chat/completions","status":"validating","input_file_id":"file_in"}`)
		case r.URL.Path == "/v1/batches/batch_1":
			_, _ = io.WriteString(w, `{"id":"batch_1","object":"batch","status":"`+status.Load().(string)+`","output_file_id":"file_out"}`)
		case r.URL.Path == "/v1/files/file_out/content":
			w.Header().Set("Content-Type", "application/jsonl")
			_, _ = io.WriteString(w, strings.Join([]string{
				`{"id":"r1","custom_id":"a","response":{"status_code":200,"body":{"id":"c1","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":200}}}},"error":null}`,
				`{"id":"r2","custom_id":"b","response":{"status_code":200,"body":{"id":"c2","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":2000,"completion_tokens":1000,"total_tokens":3000}}},"error":null}`,
				`{"id":"r3","custom_id":"c","response":null,"error":{"code":"batch_expired","message":"not run"}}`,
			}, "\n")+"\n")
		default:
			http.NotFound(w, r)
		}
	})
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	in := newInstance(t, prefix, t0, config.Env{"OPENAI_API_KEY": "k", "TOLLGATE_CONFIG": writeConfig(t, `
providers:
  - {name: openai, type: openai, base_url: `+up.URL+`/v1, api_key_env: OPENAI_API_KEY}
rate_limits:
  user_paths:
    - path: /team
      limits: [{period: day, max_tokens: 1000000}]
budgets:
  user_paths:
    - {path: /team, amount_usd: 1, period: day}
`)})
	s, b := in.call(t, "POST", "/v1/batches", master, `{"input_file_id":"file_in","endpoint":"/v1/chat/completions","completion_window":"24h"}`,
		"X-Tollgate-User-Path", "/team/etl")
	if s != 200 || !strings.Contains(string(b), "batch_1") {
		t.Fatalf("submit: %d %s", s, b)
	}
	rep, err := in.app.ChargeEndedBatches(context.Background())
	if err != nil || rep.Pending != 1 || rep.Charged != 0 {
		t.Fatalf("while it runs: %+v %v", rep, err)
	}
	status.Store("completed")
	// Two reconcilers at once: the charge lands once.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := in.app.ChargeEndedBatches(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if rep, err := in.app.ChargeEndedBatches(context.Background()); err != nil || rep.Pending != 0 {
		t.Fatalf("after charging: %+v %v", rep, err)
	}
	// gpt-4o at half its list price: 800 input, 200 cached, 500 output is
	// $0.003625; gpt-4o-mini's 2000 and 1000 are $0.00045.
	bs := usageBudgets(t, in, "/team/etl")
	if len(bs) != 1 || bs[0].SpentUSD != "0.004075" || bs[0].ReservedUSD != "0.00" {
		t.Fatalf("budget after the batch: %+v", bs)
	}
	res := in.do(t, "GET", "/v1/usage", master, "", "X-Tollgate-User-Path", "/team/etl")
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), `"tokens":{"limit":1000000,"used":4500`) {
		t.Fatalf("token window after the batch: %s", body)
	}
	if !strings.Contains(in.logs.String(), `"msg":"batch charged"`) {
		t.Fatal("no log line for the charge")
	}
}

// Batches that never end (deleted upstream: every poll a 404) do not keep
// the ones after them from being polled and charged: a run polls at most
// 50 that are due, a failed poll waits longer each time, and after ten
// failures in a row a batch is given up, logged and counted.
func TestBatchesThatNeverEndDoNotBlockOthers(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/batches/batch_live":
			_, _ = io.WriteString(w, `{"id":"batch_live","object":"batch","status":"completed","output_file_id":"file_out"}`)
		case "/v1/files/file_out/content":
			_, _ = io.WriteString(w, `{"id":"r1","custom_id":"a","response":{"status_code":200,"body":{"model":"gpt-4o-mini","usage":{"prompt_tokens":10,"completion_tokens":5}}},"error":null}`+"\n")
		default:
			http.NotFound(w, r)
		}
	})
	prefix := dynamotest.Prefix(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	in := newInstance(t, prefix, t0, config.Env{"OPENAI_API_KEY": "k", "TOLLGATE_CONFIG": writeConfig(t, `
providers:
  - {name: openai, type: openai, base_url: `+up.URL+`/v1, api_key_env: OPENAI_API_KEY}
`)})
	store := in.app.ConfigStore.(interface {
		PutBatch(context.Context, configstore.Batch) error
	})
	for i := range 120 {
		if err := store.PutBatch(context.Background(), configstore.Batch{Provider: "openai", ID: fmt.Sprintf("batch_dead_%03d", i), UserPath: "/team", SubmittedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.PutBatch(context.Background(), configstore.Batch{Provider: "openai", ID: "batch_live", UserPath: "/team", SubmittedAt: t0}); err != nil {
		t.Fatal(err)
	}
	charged := 0
	for run := 0; run < 4 && charged == 0; run++ {
		rep, _ := in.app.ChargeEndedBatches(context.Background()) // the dead ones' polls fail
		charged += rep.Charged
	}
	if charged != 1 {
		t.Fatal("the live batch behind 120 dead ones was not charged in four runs")
	}
	// Each dead batch is given up after ten failed polls, however long
	// the waits between them grow.
	givenUp := 0
	for run := 0; run < 200 && givenUp < 120; run++ {
		in.clock.Add(time.Hour)
		rep, _ := in.app.ChargeEndedBatches(context.Background())
		givenUp += rep.GivenUp
		if rep.Charged != 0 {
			t.Fatalf("run %d charged %d more", run, rep.Charged)
		}
	}
	if givenUp != 120 {
		t.Fatalf("%d of 120 dead batches given up", givenUp)
	}
	if rep, err := in.app.ChargeEndedBatches(context.Background()); err != nil || rep.Pending != 0 {
		t.Fatalf("after giving up: %+v %v", rep, err)
	}
	if !strings.Contains(in.logs.String(), "giving up on a batch whose polls keep failing") {
		t.Fatal("no log line for a batch given up")
	}
}
