package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// runtimeAPI is a stand-in for the Lambda Runtime API: it hands out queued
// events and records each response as it arrives, chunk by chunk.
type runtimeAPI struct {
	*httptest.Server
	events    chan []byte
	mu        sync.Mutex
	responses map[string]*invocation
	done      chan string
	exited    chan struct{} // closed when the function process ends
}

type invocation struct {
	contentType string
	chunks      []chunk
	body        bytes.Buffer
	errorBody   string
}

type chunk struct {
	at   time.Time
	data []byte
}

func newRuntimeAPI(t *testing.T) *runtimeAPI {
	t.Helper()
	rt := &runtimeAPI{events: make(chan []byte, 8), responses: map[string]*invocation{}, done: make(chan string, 8), exited: make(chan struct{})}
	seq := 0
	rt.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/2018-06-01/runtime/invocation/next":
			var ev []byte
			select {
			case ev = <-rt.events:
			case <-r.Context().Done():
				return
			}
			rt.mu.Lock()
			seq++
			id := fmt.Sprintf("req-%d", seq)
			rt.mu.Unlock()
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", fmt.Sprint(time.Now().Add(time.Minute).UnixMilli()))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:tollgate-gateway")
			w.Header().Set("Lambda-Runtime-Trace-Id", "Root=1-674a6f80-1a2b3c4d5e6f7a8b9c0d1e2f")
			_, _ = w.Write(ev)
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/response"):
			id := strings.Split(r.URL.Path, "/")[4]
			inv := &invocation{contentType: r.Header.Get("Content-Type")}
			buf := make([]byte, 64<<10)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					inv.chunks = append(inv.chunks, chunk{at: time.Now(), data: append([]byte(nil), buf[:n]...)})
					inv.body.Write(buf[:n])
				}
				if err != nil {
					break
				}
			}
			rt.mu.Lock()
			rt.responses[id] = inv
			rt.mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			rt.done <- id
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/error"):
			id := strings.Split(r.URL.Path, "/")[4]
			b, _ := io.ReadAll(r.Body)
			rt.mu.Lock()
			rt.responses[id] = &invocation{errorBody: string(b)}
			rt.mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			rt.done <- id
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(rt.Close)
	return rt
}

// invoke queues an event and waits for its response.
func (rt *runtimeAPI) invoke(t *testing.T, event []byte) *invocation {
	t.Helper()
	rt.events <- event
	select {
	case id := <-rt.done:
		rt.mu.Lock()
		defer rt.mu.Unlock()
		inv := rt.responses[id]
		if inv.errorBody != "" {
			t.Fatalf("the function reported an error: %s", inv.errorBody)
		}
		return inv
	case <-rt.exited:
		t.Fatal("the function exited")
		return nil
	case <-time.After(30 * time.Second):
		t.Fatal("no response from the function")
		return nil
	}
}

// built holds the functions' binaries, each built once per run of the
// package: go build relinks on every call (about 2 s, more on a busy
// machine), and every test that runs a function runs the same source
// built with the same flags. TestMain removes dir.
var built struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	built.Lock()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	built.Unlock()
	os.Exit(code)
}

// buildFunction builds a function's binary for this machine, once per run
// of the package.
func buildFunction(t *testing.T, name string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if bin, ok := built.bins[name]; ok {
		return bin
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "tollgate-functions-")
		if err != nil {
			t.Fatal(err)
		}
		built.dir, built.bins = dir, map[string]string{}
	}
	bin := filepath.Join(built.dir, name)
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bin, "../functions/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	built.bins[name] = bin
	return bin
}

// startFunction runs a function binary as Lambda would, against rt.
func startFunction(t *testing.T, bin string, rt *runtimeAPI, env ...string) *bytes.Buffer {
	t.Helper()
	var logs bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append([]string{
		"AWS_LAMBDA_RUNTIME_API=" + strings.TrimPrefix(rt.URL, "http://"),
		"AWS_LAMBDA_FUNCTION_NAME=tollgate-test",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512",
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
	}, env...)...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(rt.exited)
		close(waited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		if t.Failed() {
			t.Logf("function logs:\n%s", logs.String())
		}
	})
	return &logs
}

// splitPrelude splits a streamed REST answer into the prelude (status and
// headers as JSON), 8 NUL bytes, and the body.
func splitPrelude(t *testing.T, b []byte) (status int, headers map[string][]string, body []byte) {
	t.Helper()
	i := bytes.Index(b, make([]byte, 8))
	if i < 0 {
		t.Fatalf("no prelude delimiter in %q", b)
	}
	var p struct {
		StatusCode        int                 `json:"statusCode"`
		MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
	}
	if err := json.Unmarshal(b[:i], &p); err != nil {
		t.Fatalf("prelude %q: %v", b[:i], err)
	}
	return p.StatusCode, p.MultiValueHeaders, b[i+8:]
}

// splitURLPrelude splits a streamed function URL answer: its prelude holds
// one value per header name.
func splitURLPrelude(t *testing.T, b []byte) (status int, headers map[string]string, body []byte) {
	t.Helper()
	i := bytes.Index(b, make([]byte, 8))
	if i < 0 {
		t.Fatalf("no prelude delimiter in %q", b)
	}
	var p struct {
		StatusCode int               `json:"statusCode"`
		Headers    map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(b[:i], &p); err != nil {
		t.Fatalf("prelude %q: %v", b[:i], err)
	}
	return p.StatusCode, p.Headers, b[i+8:]
}

// The gateway binary as a Lambda function behind API Gateway's REST API
// with response streaming, and behind a function URL: a recorded event of
// each goes through the Runtime API stand-in, and the SSE chunks arrive
// one by one, not buffered whole.
func TestGatewayLambdaStreaming(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	up := newUpstream(t, replaySSE(t, "openai_chat_stream.sse", 40*time.Millisecond))
	rt := newRuntimeAPI(t)
	logs := startFunction(t, buildFunction(t, "gateway"), rt,
		"TOLLGATE_STORE=dynamodb",
		"TOLLGATE_TABLE_PREFIX="+prefix,
		"TOLLGATE_MASTER_KEY=sk-tollgate-master-test",
		"TOLLGATE_CONFIG=",
		"OPENAI_API_KEY=sk-upstream",
		"OPENAI_BASE_URL="+up.URL+"/v1",
		"SET_RATE_LIMIT_TEAM=rpm=100,tpm=100000,concurrent=5",
	)

	inv := rt.invoke(t, fixture(t, "apigw_rest_chat_stream.json"))
	if inv.contentType != "application/vnd.awslambda.http-integration-response" {
		t.Fatalf("response content type %q: not a streamed REST answer\n%s", inv.contentType, logs)
	}
	status, headers, body := splitPrelude(t, inv.body.Bytes())
	if status != 200 || !strings.HasPrefix(strings.Join(headers["Content-Type"], ""), "text/event-stream") {
		t.Fatalf("status %d headers %v\n%s", status, headers, logs)
	}
	if got := strings.Join(headers["X-Ratelimit-Limit-Requests"], ""); got != "100" {
		t.Fatalf("x-ratelimit-limit-requests %q", got)
	}
	if !bytes.Contains(body, []byte(`"content":" help"`)) || !bytes.HasSuffix(bytes.TrimSpace(body), []byte("data: [DONE]")) {
		t.Fatalf("body %s", body)
	}
	// The upstream sends an event every 40 ms: they must reach the Runtime
	// API as separate chunks spread over time.
	var spread []time.Duration
	for _, c := range inv.chunks[1:] {
		spread = append(spread, c.at.Sub(inv.chunks[0].at))
	}
	if len(inv.chunks) < 5 || spread[len(spread)-1] < 200*time.Millisecond {
		t.Fatalf("%d chunks over %v: the answer was buffered", len(inv.chunks), spread)
	}
	if up.calls.Load() != 1 {
		t.Fatalf("upstream called %d times", up.calls.Load())
	}

	// The same stream through a Lambda function URL (FrontDoor=FunctionUrl,
	// invoke mode RESPONSE_STREAM): a recorded event of its own shape, its
	// own prelude, the chunks again one by one.
	inv = rt.invoke(t, fixture(t, "lambda_url_chat_stream.json"))
	if inv.contentType != "application/vnd.awslambda.http-integration-response" {
		t.Fatalf("response content type %q: not a streamed function URL answer\n%s", inv.contentType, logs)
	}
	status, single, body := splitURLPrelude(t, inv.body.Bytes())
	if status != 200 || !strings.HasPrefix(single["Content-Type"], "text/event-stream") || single["X-Ratelimit-Limit-Requests"] != "100" {
		t.Fatalf("function URL: status %d headers %v\n%s", status, single, logs)
	}
	if !bytes.Contains(body, []byte(`"content":" help"`)) || !bytes.HasSuffix(bytes.TrimSpace(body), []byte("data: [DONE]")) {
		t.Fatalf("function URL body %s", body)
	}
	spread = spread[:0]
	for _, c := range inv.chunks[1:] {
		spread = append(spread, c.at.Sub(inv.chunks[0].at))
	}
	if len(inv.chunks) < 5 || spread[len(spread)-1] < 200*time.Millisecond {
		t.Fatalf("function URL: %d chunks over %v: the answer was buffered", len(inv.chunks), spread)
	}
	if up.calls.Load() != 2 {
		t.Fatalf("upstream called %d times", up.calls.Load())
	}

	// A base64 body (binary media types on) is decoded; a non-streaming
	// answer is one JSON body.
	up.serve = replay(t, "openai_chat.json", 200)
	inv = rt.invoke(t, fixture(t, "apigw_rest_chat_base64.json"))
	status, _, body = splitPrelude(t, inv.body.Bytes())
	if status != 200 || !bytes.Contains(body, []byte("How can I assist you today?")) {
		t.Fatalf("status %d body %s\n%s", status, body, logs)
	}

	// An HTTP API (v2) event is answered buffered, as JSON.
	inv = rt.invoke(t, fixture(t, "apigw_v2_models.json"))
	var v2 struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	if err := json.Unmarshal(inv.body.Bytes(), &v2); err != nil || v2.StatusCode != 200 || !strings.Contains(v2.Body, `"object":"list"`) {
		t.Fatalf("v2 answer %s (%v)", inv.body.Bytes(), err)
	}
}
