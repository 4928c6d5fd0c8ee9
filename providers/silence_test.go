package providers

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The requests the silence watch bounds: over plain HTTP, and ones Go's
// transport never sends twice; the others keep the transport's timer.
func TestWatchable(t *testing.T) {
	for _, c := range []struct {
		method, url string
		header      string
		want        bool
	}{
		{"POST", "http://127.0.0.1:8000/v1/chat/completions", "", true},
		{"PUT", "http://vllm.internal/v1/x", "", true},
		{"DELETE", "http://vllm.internal/v1/x", "", true},
		{"POST", "https://api.openai.com/v1/chat/completions", "", false},
		{"GET", "http://127.0.0.1:8000/v1/models", "", false},
		{"HEAD", "http://127.0.0.1:8000/v1/models", "", false},
		{"OPTIONS", "http://127.0.0.1:8000/v1/models", "", false},
		{"POST", "http://127.0.0.1:8000/v1/batches", "Idempotency-Key", false},
		{"POST", "http://127.0.0.1:8000/v1/batches", "X-Idempotency-Key", false},
	} {
		r, _ := http.NewRequest(c.method, c.url, nil)
		if c.header != "" {
			r.Header.Set(c.header, "k1")
		}
		if got := watchable(r); got != c.want {
			t.Errorf("%s %s (%s): watched %v, want %v", c.method, c.url, c.header, got, c.want)
		}
	}
}

// Through a proxy, the watch sees the request and its answer only when the
// proxy is spoken to in plain HTTP; through any other, the timer bounds it.
func TestWatchedOnlyInTheClear(t *testing.T) {
	up := NewHTTPClient(time.Minute).Transport.(*upstreamTransport)
	r, _ := http.NewRequest("POST", "http://10.0.0.5:8000/v1/chat/completions", nil)
	for _, c := range []struct {
		proxy string
		want  bool
	}{{"", true}, {"http://proxy.internal:3128", true}, {"https://proxy.internal:3128", false}, {"socks5://proxy.internal:1080", false}} {
		up.watched.Proxy = func(*http.Request) (*url.URL, error) {
			if c.proxy == "" {
				return nil, nil
			}
			return url.Parse(c.proxy)
		}
		if got := up.watches(r); got != c.want {
			t.Errorf("through %q: watched %v, want %v", c.proxy, got, c.want)
		}
	}
	up.watched.Proxy = func(*http.Request) (*url.URL, error) { return nil, errors.New("bad proxy setting") }
	if up.watches(r) {
		t.Error("watched with a proxy setting that fails: the transport's own error is the answer")
	}
}

// silentUpstream answers a request whose body is "answer" at once, and
// holds any other until release is closed or the client leaves.
func silentUpstream(t *testing.T) (srv *httptest.Server, release func()) {
	done := make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != "answer" {
			select {
			case <-done:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	t.Cleanup(func() { release(); srv.Close() })
	return srv, release
}

func post(t *testing.T, c *http.Client, url, body string) (*http.Response, *Error) {
	t.Helper()
	req, err := NewRequest(context.Background(), http.MethodPost, url, []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	return Send(c, "p", req)
}

// An upstream that takes a plain-HTTP request and sends nothing fails it
// once the provider's timeout has passed, not before, with a timeout error
// that says so; the client goes on to serve other requests.
func TestSilentUpstreamTimesOut(t *testing.T) {
	srv, _ := silentUpstream(t)
	const timeout = 100 * time.Millisecond
	c := NewHTTPClient(timeout)
	defer c.CloseIdleConnections()
	start := time.Now()
	_, perr := post(t, c, srv.URL+"/v1/chat/completions", "hold")
	took := time.Since(start)
	if perr == nil {
		t.Fatal("a silent upstream's request succeeded")
	}
	var silence *SilenceError
	if !errors.Is(perr, os.ErrDeadlineExceeded) || !errors.As(perr, &silence) || silence.After != timeout || perr.Status != 0 || !perr.Retryable() {
		t.Fatalf("error %v (%T): want a timeout the gateway may fail over from", perr, perr.Err)
	}
	if !strings.Contains(perr.Error(), "sent no answer for 100ms") {
		t.Errorf("error %q does not say what happened", perr.Error())
	}
	if took < timeout {
		t.Errorf("failed after %v, before the timeout of %v", took, timeout)
	}
	resp, perr := post(t, c, srv.URL+"/v1/chat/completions", "answer")
	if perr != nil {
		t.Fatalf("the next request: %v", perr)
	}
	resp.Body.Close()
}

// An upstream that begins its answer's headers and never ends them times
// out as one that sends nothing: the wait is for the headers whole.
func TestHalfHeadersTimeOut(t *testing.T) {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
		_ = buf.Flush()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}))
	defer srv.Close()
	defer close(done)
	c := NewHTTPClient(50 * time.Millisecond)
	defer c.CloseIdleConnections()
	if _, perr := post(t, c, srv.URL+"/v1/chat/completions", "{}"); perr == nil || !errors.Is(perr, os.ErrDeadlineExceeded) {
		t.Fatalf("half an answer's headers: %v, want the provider's timeout", perr)
	}
}

// The watch bounds the wait for an answer's first byte, not a stream: one
// that pauses for longer than the timeout between events is not cut.
func TestSilenceWatchLetsAStreamPause(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"} {
			_, _ = io.WriteString(w, ev)
			http.NewResponseController(w).Flush()
			time.Sleep(4 * timeout)
		}
	}))
	defer srv.Close()
	c := NewHTTPClient(timeout)
	defer c.CloseIdleConnections()
	resp, perr := post(t, c, srv.URL+"/v1/chat/completions", "{}")
	if perr != nil {
		t.Fatal(perr)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n" {
		t.Fatalf("stream %q, %v", b, err)
	}
}

// A connection idle in the pool for longer than the timeout is not
// waiting for anything: the watch leaves it, and the next request goes
// out on it. Once the client lets its connections go, the watch holds
// none and schedules no sweep.
func TestSilenceWatchLeavesIdleConnections(t *testing.T) {
	srv, _ := silentUpstream(t)
	const timeout = 20 * time.Millisecond
	c := NewHTTPClient(timeout)
	watch := c.Transport.(*upstreamTransport).watch
	send := func() (reused bool) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req, _ := NewRequest(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, srv.URL+"/v1/x", []byte("answer"), nil)
		resp, perr := Send(c, "p", req)
		if perr != nil {
			t.Fatal(perr)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return reused
	}
	send()
	if n, sweeping := watch.holds(); n != 1 || !sweeping {
		t.Fatalf("the watch holds %d connections (sweeping %v), want the one dialled", n, sweeping)
	}
	time.Sleep(10 * timeout) // many sweeps
	if !send() {
		t.Error("the idle connection was closed by the watch")
	}
	c.CloseIdleConnections()
	if n, sweeping := watch.holds(); n != 0 || sweeping {
		t.Errorf("after the connections closed, the watch holds %d (sweeping %v)", n, sweeping)
	}
}

// Requests that answer and requests that do not, side by side on one
// client: each silent one fails at its timeout, each other one succeeds,
// and none of the connections is left held by the watch.
func TestSilenceWatchConcurrent(t *testing.T) {
	srv, release := silentUpstream(t)
	const timeout = 50 * time.Millisecond
	c := NewHTTPClient(timeout)
	watch := c.Transport.(*upstreamTransport).watch
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := range 40 {
		wg.Go(func() {
			body := "answer"
			if i%4 == 0 {
				body = "hold"
			}
			resp, perr := post(t, c, srv.URL+"/v1/x", body)
			switch {
			case body == "hold" && (perr == nil || !errors.Is(perr, os.ErrDeadlineExceeded)):
				errs <- "a silent request: " + errString(perr)
			case body == "answer" && perr != nil:
				errs <- "an answered request: " + perr.Error()
			}
			if resp != nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	release()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	c.CloseIdleConnections()
	if n, sweeping := watch.holds(); n != 0 || sweeping {
		t.Errorf("the watch holds %d connections (sweeping %v) after all closed", n, sweeping)
	}
}

func errString(e *Error) string {
	if e == nil {
		return "no error"
	}
	return e.Error()
}

// The wait a connection is in, step by step, with the sweep called by
// hand: a write starts it, the answer's headers read whole end it, and a
// sweep closes a connection only once it has waited the whole timeout;
// its read then fails with the watch's error.
func TestWatchedConnWaits(t *testing.T) {
	w := newSilenceWatch(time.Hour) // no sweep of its own in this test
	client, server := net.Pipe()
	defer server.Close()
	conn, err := w.dial(func(context.Context, string, string) (net.Conn, error) { return client, nil })(context.Background(), "tcp", "x")
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(*watchedConn)
	go func() { _, _ = io.ReadFull(server, make([]byte, 3)) }()
	if _, err := c.Write([]byte("GET")); err != nil || c.waiting.Load() == 0 {
		t.Fatalf("after a write: waiting since %d (%v)", c.waiting.Load(), err)
	}
	go func() { _, _ = io.WriteString(server, "HTTP/1.1 200 OK\r\n") }()
	if n, err := c.Read(make([]byte, 64)); n == 0 || err != nil || c.waiting.Load() == 0 {
		t.Fatalf("after a status line alone: waiting since %d (%d, %v)", c.waiting.Load(), n, err)
	}
	go func() { _, _ = io.WriteString(server, "\r\n") }()
	if n, err := c.Read(make([]byte, 64)); n == 0 || err != nil || c.waiting.Load() != 0 {
		t.Fatalf("after the headers' end: waiting since %d (%d, %v)", c.waiting.Load(), n, err)
	}
	go func() { _, _ = io.ReadFull(server, make([]byte, 3)) }()
	_, _ = c.Write([]byte("GET"))
	// Waiting, but not yet for the whole timeout: the sweep leaves it.
	c.waiting.Store(clock() - int64(time.Hour) + int64(time.Minute))
	w.sweep()
	if c.silenced.Load() {
		t.Fatal("closed before its timeout")
	}
	// Waiting for the whole timeout: closed, and its read says why.
	c.waiting.Store(clock() - int64(time.Hour))
	w.sweep()
	_, err = c.Read(make([]byte, 1))
	var silence *SilenceError
	if !errors.As(err, &silence) || silence.After != time.Hour {
		t.Fatalf("read after the sweep: %v", err)
	}
	if n, sweeping := w.holds(); n != 0 || sweeping {
		t.Errorf("the watch holds %d (sweeping %v) after closing its one connection", n, sweeping)
	}
}

// The end of an answer's headers is found however the answer is cut into
// reads: at the read that brings the blank line's last byte, never
// before; and a new wait forgets what the last one read.
func TestHeadersEndInAnyReads(t *testing.T) {
	const answer = "HTTP/1.1 200 OK\r\nA: b\r\n\r\n{\"x\":\"\r\n\r\n\"}"
	end := strings.Index(answer, "\r\n\r\n") + 4 // the blank line's last byte, +1
	check := func(cuts []int) {
		t.Helper()
		c := &watchedConn{}
		from := 0
		for i, to := range append(cuts, len(answer)) {
			got := c.headersEnd(1, []byte(answer[from:to]))
			if want := from < end && end <= to; got != want {
				t.Fatalf("cut at %v: read %d (%q) ends the headers: %v, want %v", cuts, i, answer[from:to], got, want)
			}
			if got {
				return
			}
			from = to
		}
	}
	for i := 1; i < len(answer); i++ {
		check([]int{i})
		for j := i + 1; j < len(answer); j++ {
			check([]int{i, j})
		}
	}
	var bytewise []int
	for i := 1; i < len(answer); i++ {
		bytewise = append(bytewise, i)
	}
	check(bytewise)
	// "\r\n" read in one wait and "\r\n" in the next is no blank line.
	c := &watchedConn{}
	if c.headersEnd(1, []byte("x\r\n")) || c.headersEnd(2, []byte("\r\n")) {
		t.Error("a blank line made of two waits' reads")
	}
}
