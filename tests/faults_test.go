package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
)

// The invariants of DESIGN §8, end to end: three gateway processes (the
// real binary) share DynamoDB Local through a proxy that breaks what
// DynamoDB and the network between break. It applies writes and loses
// their answers, answers 500 after applying them, and drops every call for
// a while. A fake upstream counts what really reaches it.

// faultProxy stands between the gateways and the engine.
type faultProxy struct {
	*httptest.Server
	engine string
	// Per-mille of writes to apply and lose the answer of, and to apply
	// and answer 500.
	lose, fail500 atomic.Int64
	down          atomic.Bool
	lost, failed  atomic.Int64 // faults dealt
	dropped       atomic.Int64
	client        *http.Client
}

var writeOps = map[string]bool{"UpdateItem": true, "PutItem": true, "DeleteItem": true, "TransactWriteItems": true, "BatchWriteItem": true}

func newFaultProxy(t *testing.T) *faultProxy {
	t.Helper()
	p := &faultProxy{engine: dynamotest.Endpoint(t), client: &http.Client{Timeout: 20 * time.Second}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

// cut ends the client's connection with no answer: what a reset or a
// timeout looks like from the SDK.
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, not a clean close
	}
	conn.Close()
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if p.down.Load() {
		p.dropped.Add(1)
		cut(w)
		return
	}
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.IndexByte(op, '.')+1:]
	req, _ := http.NewRequest(r.Method, p.engine+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	res, err := p.client.Do(req)
	if err != nil {
		cut(w)
		return
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	if writeOps[op] {
		roll := rand.Int64N(1000)
		switch {
		case roll < p.lose.Load():
			p.lost.Add(1)
			cut(w) // applied; the answer is lost
			return
		case roll < p.lose.Load()+p.fail500.Load():
			p.failed.Add(1)
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}`)
			return
		}
	}
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(answer)
}

// countingUpstream is an OpenAI-compatible upstream that answers after a
// delay and keeps, per model, how many requests are inside it at once
// (the most ever) and how many arrived.
type countingUpstream struct {
	*httptest.Server
	delay atomic.Int64 // ns
	mu    sync.Mutex
	now   map[string]int
	peak  map[string]int
	total map[string]int
}

func newCountingUpstream(t *testing.T) *countingUpstream {
	t.Helper()
	u := &countingUpstream{now: map[string]int{}, peak: map[string]int{}, total: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		u.mu.Lock()
		u.now[req.Model]++
		u.total[req.Model]++
		u.peak[req.Model] = max(u.peak[req.Model], u.now[req.Model])
		u.mu.Unlock()
		defer func() {
			u.mu.Lock()
			u.now[req.Model]--
			u.mu.Unlock()
		}()
		select {
		case <-time.After(time.Duration(u.delay.Load())):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`, req.Model)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *countingUpstream) stats(model string) (peak, total int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.peak[model], u.total[model]
}

func (u *countingUpstream) resetPeak(model string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.peak[model] = u.now[model]
}

// gatewayProcess is the gateway binary running as a local process.
type gatewayProcess struct {
	url  string
	logs string
}

func startGateways(t *testing.T, bin string, n int, prefix, ddb, upstream, config string) []gatewayProcess {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tollgate.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var out []gatewayProcess
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		logPath := filepath.Join(dir, fmt.Sprintf("gateway-%d.log", i))
		logFile, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("PORT=%d", port),
			"TOLLGATE_STORE=dynamodb", "TOLLGATE_TABLE_PREFIX="+prefix, "TOLLGATE_CONFIG="+cfg,
			"TOLLGATE_RECONCILE_INTERVAL=1s", "TOLLGATE_LOG_LEVEL=info",
			"AWS_ENDPOINT_URL_DYNAMODB="+ddb, "AWS_ENDPOINT_URL_DYNAMODB_STREAMS="+ddb,
			"OPENAI_API_KEY=k", "OPENAI_BASE_URL="+upstream+"/v1",
		)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-waited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-waited
			}
			logFile.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				if len(b) > 20000 {
					b = b[len(b)-20000:]
				}
				t.Logf("gateway %d logs (tail):\n%s", i, b)
			}
		})
		g := gatewayProcess{url: fmt.Sprintf("http://127.0.0.1:%d", port), logs: logPath}
		deadline := time.Now().Add(30 * time.Second)
		for {
			res, err := http.Get(g.url + "/healthz")
			if err == nil {
				res.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(logPath)
				t.Fatalf("gateway %d did not start: %v\n%s", i, err, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
		out = append(out, g)
	}
	return out
}

var clientHTTP = &http.Client{Timeout: 30 * time.Second}

// chatVia sends one chat completion for model, as user path path.
func chatVia(g gatewayProcess, path, model string) int {
	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"openai/`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
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

// A concurrent=2 rule and a rpm=20 rule under lost answers, 500s after
// applied writes and outages: never more than 2 at the upstream, never
// more than 20 in the minute; once the faults stop and one lease TTL
// passes, nothing is left held: a burst of 6 gets exactly 2 in.
func TestLimitsHoldUnderStoreFaults(t *testing.T) {
	t.Parallel() // waits in real time on its own processes, tables and ports; see docs/testing.md
	prefix := dynamotest.Prefix(t)
	proxy := newFaultProxy(t)
	up := newCountingUpstream(t)
	bin := buildFunction(t, "gateway")
	const leaseTTL = 10 * time.Second
	config := fmt.Sprintf(`rate_limits:
  user_paths:
    - path: /c
      limits:
        - period: concurrent
          max_requests: 2
    - path: /r
      limits:
        - period: minute
          max_requests: 20
gateway:
  lease_ttl: %s
`, leaseTTL)
	gws := startGateways(t, bin, 3, prefix, proxy.URL, up.URL, config)

	// The rpm rule is counted within one minute window: start with time
	// left in it.
	if s := time.Now().Second(); s > 44 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	minute := time.Now().Truncate(time.Minute)

	up.delay.Store(int64(150 * time.Millisecond))
	proxy.lose.Store(100)    // 10 % of writes applied, answer lost
	proxy.fail500.Store(100) // 10 % applied, then 500
	var codes sync.Map
	count := func(path string, code int) {
		v, _ := codes.LoadOrStore(fmt.Sprint(path, " ", code), new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	ctx, stop := context.WithTimeout(context.Background(), 12*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i := range 12 {
		path, model := "/c", "c"
		if i >= 8 {
			path, model = "/r", "r"
		}
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				count(path, chatVia(gws[(i+n)%len(gws)], path, model))
				if path == "/r" {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	// Two short outages during the run: every call dropped.
	wg.Go(func() {
		for _, at := range []time.Duration{3 * time.Second, 8 * time.Second} {
			select {
			case <-time.After(at - 2*time.Second):
			case <-ctx.Done():
				return
			}
			proxy.down.Store(true)
			time.Sleep(time.Second)
			proxy.down.Store(false)
		}
	})
	wg.Wait()
	proxy.lose.Store(0)
	proxy.fail500.Store(0)
	codes.Range(func(k, v any) bool { t.Logf("%s: %d", k, v.(*atomic.Int64).Load()); return true })
	t.Logf("faults dealt: %d answers lost, %d 500s after applying, %d calls dropped", proxy.lost.Load(), proxy.failed.Load(), proxy.dropped.Load())
	if proxy.lost.Load() == 0 || proxy.failed.Load() == 0 || proxy.dropped.Load() == 0 {
		t.Fatal("some kind of fault was never dealt: the test proves nothing")
	}
	if peak, total := up.stats("c"); peak > 2 || total == 0 {
		t.Fatalf("concurrent=2: %d requests at the upstream at once (%d in all)", peak, total)
	}
	if _, total := up.stats("r"); total > 20 || total == 0 {
		t.Fatalf("rpm=20: %d admitted in the minute", total)
	} else if time.Now().Truncate(time.Minute) != minute {
		t.Fatal("the run crossed a minute boundary: the rpm count is not of one window")
	} else {
		t.Logf("rpm=20: %d admitted in the minute", total)
	}

	// Faults over; one lease TTL later nothing may still hold a slot.
	time.Sleep(leaseTTL)
	up.delay.Store(int64(2 * time.Second))
	up.resetPeak("c")
	results := make([]int, 6)
	var burst sync.WaitGroup
	for i := range 6 {
		burst.Go(func() { results[i] = chatVia(gws[i%len(gws)], "/c", "c") })
	}
	burst.Wait()
	ok := 0
	for _, c := range results {
		if c == 200 {
			ok++
		}
	}
	if peak, _ := up.stats("c"); ok != 2 || peak != 2 {
		t.Fatalf("burst of 6 after the faults: %v (%d at the upstream at once), want exactly 2 admitted", results, peak)
	}
}

// Slots held across a 7 s store outage come back within seconds of the
// store returning: the completions are retried until they land, not left
// to the lease's expiry (two minutes here).
func TestSlotsBackAfterOutage(t *testing.T) {
	t.Parallel() // waits in real time on its own processes, tables and ports; see docs/testing.md
	prefix := dynamotest.Prefix(t)
	proxy := newFaultProxy(t)
	up := newCountingUpstream(t)
	bin := buildFunction(t, "gateway")
	config := `rate_limits:
  user_paths:
    - path: /o
      limits:
        - period: concurrent
          max_requests: 2
gateway:
  lease_ttl: 2m
`
	gws := startGateways(t, bin, 2, prefix, proxy.URL, up.URL, config)
	up.delay.Store(int64(2 * time.Second))
	var held sync.WaitGroup
	for i := range 2 {
		held.Go(func() {
			if c := chatVia(gws[i], "/o", "o"); c != 200 {
				t.Errorf("request %d holding a slot: %d", i, c)
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // both admitted and at the upstream
	proxy.down.Store(true)
	held.Wait() // they finish inside the outage: their completions fail
	time.Sleep(7*time.Second - 2*time.Second)
	proxy.down.Store(false)
	back := time.Now()
	up.delay.Store(int64(10 * time.Millisecond))
	for {
		if chatVia(gws[0], "/o", "o") == 200 && chatVia(gws[1], "/o", "o") == 200 {
			break
		}
		if time.Since(back) > 15*time.Second {
			t.Fatalf("the slots are still held %v after the store came back", time.Since(back))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("slots back %v after the store returned (lease TTL 2m)", time.Since(back).Round(10*time.Millisecond))
}

// A lost write answer almost never costs a unit: with 20 % of write
// answers lost after applying, 8 clients of one gateway draining a rule
// of 20 requests get at least 18 of them in, in each of 10 runs, and
// never more than 20. Each charge leaves its writer token in one of the
// counter item's slots (infra/dynamostore/retry.go), so a writer whose
// answer was lost finds it there unless another writer took the same slot
// in between; only then is the charge kept unverified (a 503, the unit
// spent).
func TestLostAnswersRarelyCostAUnit(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	proxy := newFaultProxy(t)
	up := newCountingUpstream(t)
	bin := buildFunction(t, "gateway")
	// A day's window per child: each run drains its own counter, and no
	// run crosses a window boundary but at midnight.
	config := `rate_limits:
  user_paths:
    - path: /r
      per_child: true
      limits:
        - {period_seconds: 86400, max_requests: 20}
`
	gw := startGateways(t, bin, 1, prefix, proxy.URL, up.URL, config)[0]
	proxy.lose.Store(200) // 20 % of writes applied, their answer lost
	var worst int
	for run := range 10 {
		child := fmt.Sprintf("run-%d", run)
		var unavailable, refused atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for n := 0; n < 30; n++ { // bounded: 20 fit, the rest are refused
					switch chatVia(gw, "/r/"+child, child) {
					case http.StatusTooManyRequests:
						refused.Add(1)
						return
					case http.StatusServiceUnavailable:
						unavailable.Add(1) // truly ambiguous: the client retries
					}
				}
			})
		}
		wg.Wait()
		_, admitted := up.stats(child)
		t.Logf("run %d: %d of 20 admitted, %d answered 503", run, admitted, unavailable.Load())
		if admitted > 20 {
			t.Fatalf("run %d: %d admitted past a limit of 20", run, admitted)
		}
		if refused.Load() == 0 {
			t.Fatalf("run %d: the rule never refused: the clients gave up first", run)
		}
		worst = max(worst, 20-admitted)
	}
	t.Logf("faults dealt: %d answers lost", proxy.lost.Load())
	if proxy.lost.Load() == 0 {
		t.Fatal("no answer was lost: the test proves nothing")
	}
	if worst > 2 {
		t.Fatalf("a run admitted %d of 20: lost answers cost more than 2 units", 20-worst)
	}
}
