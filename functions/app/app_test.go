package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/memstore"
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

// The local process's reconciler loop itself, at the default interval
// (5 s): it settles what the gateway served, and its change feed does not
// grow. Each run used to stop before reading, its one-interval budget
// inside the reconciler's 5 s margin.
func TestReconcilerLoopSettlesAtDefaultInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	a, err := app.New(ctx, config.Env{"SET_RATE_LIMIT_": "tpd=100000"}, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if a.Config.Settings.ReconcileInterval != 5*time.Second {
		t.Fatalf("default interval %v", a.Config.Settings.ReconcileInterval)
	}
	if err := a.BuildGateway(); err != nil {
		t.Fatal(err)
	}
	served := time.Now() // the day window the requests are counted in
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
		us, err := a.Limiter.AllUsage(ctx, served)
		if err != nil || len(us) != 1 {
			t.Fatal(us, err)
		}
		return us[0].Dimensions[0].Used
	}
	before := used()
	done := make(chan struct{})
	go func() { a.RunReconcilerLoop(ctx); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for used() != before-3*(500-16) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the window holds %d, want %d: the loop settled nothing\n%s", used(), before-3*(500-16), logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done
	if strings.Contains(logs.String(), "stopped for its time budget") {
		t.Fatalf("a run stopped for its budget:\n%s", logs.String())
	}
	if evs, _ := a.Store.(*memstore.Store).Events(0, 1000); len(evs) != 0 {
		t.Fatalf("%d events left in the change feed after settlement", len(evs))
	}
}

// serveChats sends n chat completions reserving 500 output tokens each.
func serveChats(t *testing.T, a *app.App, n int) {
	t.Helper()
	for range n {
		r := httptest.NewRequest("POST", "/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello there"}],"max_tokens":500}`))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		a.Gateway.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("status %d %s", w.Code, w.Body)
		}
	}
}

// usedTokens reads the one rule's current count in the window of at.
func usedTokens(t *testing.T, a *app.App, at time.Time) int64 {
	t.Helper()
	us, err := a.Limiter.AllUsage(context.Background(), at)
	if err != nil || len(us) != 1 {
		t.Fatal(us, err)
	}
	return us[0].Dimensions[0].Used
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLambdaRefusesMemoryStoreAndNoMasterKey(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if _, err := app.New(ctx, config.Env{"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001"}, log); err == nil ||
		!strings.Contains(err.Error(), "TOLLGATE_STORE=memory inside Lambda") {
		t.Fatalf("memory store inside Lambda: %v", err)
	}
}

// The deployed functions get the master key and provider keys from SSM
// parameters named by *_PARAMETER variables, never from the template.
func TestKeysFromSSMParameters(t *testing.T) {
	params := map[string]string{"/tollgate/master-key": "mk-from-ssm", "/tollgate/openai": "sk-from-ssm"}
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Name           string
			WithDecryption bool
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		asked = append(asked, in.Name)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		v, ok := params[in.Name]
		if r.Header.Get("X-Amz-Target") != "AmazonSSM.GetParameter" || !ok || !in.WithDecryption {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"ParameterNotFound","message":"not found"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"Parameter": map[string]any{"Name": in.Name, "Type": "SecureString", "Value": v}})
	}))
	defer srv.Close()
	var upstreamAuth string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamAuth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"gpt-4o",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}`)
	}))
	defer upstream.Close()
	t.Setenv("AWS_ENDPOINT_URL_SSM", srv.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "us-east-1")
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	a, err := app.New(ctx, config.Env{
		"TOLLGATE_CONFIG":               "",
		"TOLLGATE_MASTER_KEY_PARAMETER": "/tollgate/master-key",
		"OPENAI_API_KEY_PARAMETER":      "/tollgate/openai",
		"OPENAI_BASE_URL":               upstream.URL,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.BuildGateway(); err != nil {
		t.Fatal(err)
	}
	// The master key from SSM is accepted; the upstream sees the provider
	// key from SSM.
	r := httptest.NewRequest("POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":5}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer mk-from-ssm")
	w := httptest.NewRecorder()
	a.Gateway.ServeHTTP(w, r)
	if w.Code != http.StatusOK || upstreamAuth != "Bearer sk-from-ssm" {
		t.Fatalf("status %d, upstream saw %q: %s", w.Code, upstreamAuth, w.Body)
	}
	r.Header.Set("Authorization", "Bearer not-the-master-key")
	w = httptest.NewRecorder()
	a.Gateway.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("a wrong key: status %d", w.Code)
	}

	// A parameter that cannot be read stops the start, naming the variable.
	_, err = app.New(ctx, config.Env{"TOLLGATE_CONFIG": "", "TOLLGATE_MASTER_KEY_PARAMETER": "/tollgate/missing"}, log)
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_MASTER_KEY_PARAMETER") || !strings.Contains(err.Error(), "/tollgate/missing") {
		t.Fatalf("missing parameter: %v", err)
	}
	if !slices.Contains(asked, "/tollgate/missing") {
		t.Fatalf("SSM was asked for %v", asked)
	}
}
