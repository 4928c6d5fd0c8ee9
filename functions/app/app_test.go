package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
)

// A local process on the embedded store: the in-process reconciler settles
// the reservations of the requests the gateway served to what the mock
// provider reported using.
func TestLocalProcessReconcilesInProcess(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	a, err := app.New(ctx, config.Env{"SET_RATE_LIMIT_": "tpm=100000"}, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.BuildGateway(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r := httptest.NewRequest("POST", "/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello there"}],"max_tokens":500}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		a.Gateway.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("status %d %s", w.Code, w.Body)
		}
	}
	used := func() int64 {
		us, err := a.Limiter.AllUsage(ctx, time.Now())
		if err != nil || len(us) != 1 {
			t.Fatal(us, err)
		}
		return us[0].Dimensions[0].Used
	}
	before := used()
	rc, err := a.NewReconciler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rc.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The mock answers 16 tokens (its cap) for each 500 reserved.
	if rep.Settled != 3 || before-used() != 3*(500-16) {
		t.Fatalf("run %+v: window %d → %d, want %d less", rep, before, used(), 3*(500-16))
	}
	if !strings.Contains(logs.String(), `"msg":"reconciler run"`) || !strings.Contains(logs.String(), `"actual_over_estimate"`) {
		t.Fatalf("no reconciler log line with the estimate error:\n%s", logs.String())
	}
}

func TestLambdaRefusesMemoryStoreAndNoMasterKey(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if _, err := app.New(ctx, config.Env{"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001"}, log); err == nil ||
		!strings.Contains(err.Error(), "TOLLGATE_STORE=memory inside Lambda") {
		t.Fatalf("memory store inside Lambda: %v", err)
	}
}
