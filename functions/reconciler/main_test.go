package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
)

func counter(t *testing.T, key string, period time.Duration, amount int64) limiter.Charge {
	t.Helper()
	c, err := dynamostore.ParseCounterKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return limiter.Charge{Counter: c, Period: period, Limit: 1 << 40, Amount: amount}
}

// The event source mapping wiring: a recorded stream event (a completion,
// an expiry, a TTL removal of an active lease, an insert) is applied once,
// and delivering it again changes nothing.
func TestStreamEvent(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	ctx := context.Background()
	a, err := app.New(ctx, config.Env{"TOLLGATE_STORE": "dynamodb", "TOLLGATE_TABLE_PREFIX": prefix}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	store := a.Store.(*dynamostore.Store)
	// The windows of the recorded leases (minute 29933333), charged as
	// their admissions charged them: the completed request and the one
	// whose lease TTL removed each reserved tokens and hold a slot.
	now := time.Unix(29933333*60+5, 0)
	charges := []limiter.Charge{
		counter(t, "21:user_path:/team:60@g1|tok|29933333|0|", time.Minute, 2*520),
		counter(t, "22:model:openai/gpt-4o:60|in|29933333|0|", time.Minute, 2*120),
		counter(t, "22:model:openai/gpt-4o:60|out|29933333|0|", time.Minute, 2*400),
		counter(t, "18:provider:openai:60|req|29933333|0|", time.Minute, 2),
	}
	if out, err := store.Charge(ctx, now, charges, nil); err != nil || !out.Admitted {
		t.Fatal(out, err)
	}
	// The slot gauge holds the slot of the lease TTL removed and one of a
	// request still running.
	slot := counter(t, "17:user_path:/team:c|fly|0|0|", 0, 1)
	slot.Limit = 10
	for id, adm := range map[string]int64{"req-ttl.0": 1795999982000, "req-running.0": 1795999983000} {
		l := &limiter.Lease{ID: id, AdmittedAt: time.UnixMilli(adm), ExpiresAt: now.Add(time.Hour), Charges: []limiter.Charge{slot}}
		if out, err := store.Charge(ctx, now, []limiter.Charge{slot}, l); err != nil || !out.Admitted {
			t.Fatal(out, err)
		}
	}
	charges = append(charges, slot)
	raw, err := os.ReadFile("testdata/stream_event.json")
	if err != nil {
		t.Fatal(err)
	}
	h := handler(a)
	for pass := range 2 {
		res, err := h(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		if resp := res.(events.DynamoDBEventResponse); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("pass %d: failures %+v", pass, resp.BatchItemFailures)
		}
		st, err := store.Read(ctx, now, charges)
		if err != nil {
			t.Fatal(err)
		}
		// Completed: 520 reserved, 137 used (100 in, 37 out). The TTL
		// removal keeps its reservation and frees its slot; the completed
		// request freed its own when it completed (not in this event).
		want := []int64{520 + 137, 120 + 100, 400 + 37, 2, 1}
		for i, w := range want {
			if st[i].Cur != w {
				t.Errorf("pass %d: %s = %d, want %d", pass, dynamostore.CounterKey(charges[i].Counter), st[i].Cur, w)
			}
		}
	}
}

// The scheduled wiring answers what the run did.
func TestScheduledEvent(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	ctx := context.Background()
	a, err := app.New(ctx, config.Env{"TOLLGATE_STORE": "dynamodb", "TOLLGATE_TABLE_PREFIX": prefix}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	event := `{"version":"0","id":"53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa","detail-type":"Scheduled Event","source":"aws.events",` +
		`"account":"123456789012","time":"2026-11-30T00:00:00Z","region":"us-east-1","resources":["arn:aws:events:us-east-1:123456789012:rule/tollgate-reconcile"],"detail":{}}`
	res, err := handler(a)(ctx, json.RawMessage(event))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.(RunResult); !ok {
		t.Fatalf("scheduled run answered %T", res)
	}
}
