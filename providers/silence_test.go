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

// post sends body to url through c, within 10 s (a watch that never fires
// fails the test instead of hanging it).
func post(c *http.Client, url, body string) (*http.Response, *Error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := NewRequest(ctx, http.MethodPost, url, []byte(body), nil)
	if err != nil {
		return nil, &Error{Err: err}
	}
	resp, perr := Send(c, "p", req)
	if resp != nil {
		// Read before the deadline's cancel; the caller gets it whole.
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, &Error{Provider: "p", Err: err}
		}
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
	}
	return resp, perr
}

// silence checks that perr is the watch's timeout after d, which the
// gateway answers as the transport's own (504) and fails over from.
func silence(t *testing.T, perr *Error, d time.Duration) {
	t.Helper()
	var se *SilenceError
	switch {
	case perr == nil:
		t.Fatal("a silent upstream's request succeeded")
	case !errors.As(perr, &se) || se.After != d:
		t.Fatalf("error %v: want the watch's timeout of %v", perr, d)
	case !errors.Is(perr, context.DeadlineExceeded) || !errors.Is(perr, os.ErrDeadlineExceeded):
		t.Fatalf("error %v is not a deadline exceeded", perr)
	case perr.Status != 0 || !perr.Retryable():
		t.Fatalf("error %v: status %d, retryable %v; want a failure the gateway fails over from", perr, perr.Status, perr.Retryable())
	}
}

// An upstream that takes a plain-HTTP request and sends nothing fails it
// once the provider's timeout has passed, not before, with a timeout error
// that says so; the client goes on to serve other requests.
func TestSilentUpstreamTimesOut(t *testing.T) {
	srv, _ := silentUpstream(t)
	const timeout = 200 * time.Millisecond
	c := NewHTTPClient(timeout)
	defer c.CloseIdleConnections()
	start := time.Now()
	_, perr := post(c, srv.URL+"/v1/chat/completions", "hold")
	took := time.Since(start)
	silence(t, perr, timeout)
	if !strings.Contains(perr.Error(), "no answer's headers for 200ms") {
		t.Errorf("error %q does not say what happened", perr.Error())
	}
	if took < timeout {
		t.Errorf("failed after %v, before the timeout of %v", took, timeout)
	}
	resp, perr := post(c, srv.URL+"/v1/chat/completions", "answer")
	if perr != nil {
		t.Fatalf("the next request: %v", perr)
	}
	resp.Body.Close()
}

// hijacked is an upstream that reads the request and writes raw bytes
// back, then holds the connection until the test ends.
func hijacked(t *testing.T, raw ...string) *httptest.Server {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		for _, b := range raw {
			_, _ = buf.WriteString(b)
			_ = buf.Flush()
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return srv
}

// The wait is for the answer's headers whole, past any informational
// answer: an upstream that begins its headers and stalls, or sends a 102
// and nothing more, times out as one that sends nothing.
func TestHalfHeadersAndInterimAnswersTimeOut(t *testing.T) {
	const timeout = 150 * time.Millisecond
	for name, raw := range map[string][]string{
		"half headers":     {"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"},
		"102, then silent": {"HTTP/1.1 102 Processing\r\n\r\n"},
		"103, then silent": {"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"},
	} {
		c := NewHTTPClient(timeout)
		_, perr := post(c, hijacked(t, raw...).URL+"/v1/chat/completions", "{}")
		c.CloseIdleConnections()
		t.Run(name, func(t *testing.T) { silence(t, perr, timeout) })
	}
}

// Once the headers are in, the watch has nothing more to bound: a stream
// that pauses for longer than the timeout between events is not cut, also
// when its headers end in bare line feeds, which Go's client takes.
func TestSilenceWatchLetsAStreamPause(t *testing.T) {
	const timeout = 150 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"} {
			_, _ = io.WriteString(w, ev)
			http.NewResponseController(w).Flush()
			time.Sleep(3 * timeout)
		}
	}))
	defer srv.Close()
	lf := hijacked(t, "HTTP/1.1 200 OK\nContent-Type: text/event-stream\nContent-Length: 18\n\n", "data: 1\n\n", "", "", "", "", "data: 2\n\n")
	for name, u := range map[string]string{"stream": srv.URL, "bare line feeds": lf.URL} {
		c := NewHTTPClient(timeout)
		resp, perr := post(c, u+"/v1/chat/completions", "{}")
		c.CloseIdleConnections()
		if perr != nil {
			t.Fatalf("%s: %v", name, perr)
		}
		b, _ := io.ReadAll(resp.Body)
		if want := map[string]string{"stream": "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n", "bare line feeds": "data: 1\n\ndata: 2\n\n"}[name]; string(b) != want {
			t.Errorf("%s: %q, want %q", name, b, want)
		}
	}
}

// An upstream may answer before it has read the whole request: the wait
// ends with the answer, and the rest of the body written after it does
// not start another, which would cut the stream that follows.
func TestSilenceWatchAnswerBeforeTheWholeBody(t *testing.T) {
	const timeout = 150 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush() // the answer's headers, before the body is read
		_, _ = io.Copy(io.Discard, r.Body)
		for _, ev := range []string{"data: 1\n\n", "data: [DONE]\n\n"} {
			time.Sleep(3 * timeout)
			_, _ = io.WriteString(w, ev)
			http.NewResponseController(w).Flush()
		}
	}))
	defer srv.Close()
	c := NewHTTPClient(timeout)
	defer c.CloseIdleConnections()
	resp, perr := post(c, srv.URL+"/v1/x", strings.Repeat("x", 8<<20))
	if perr != nil {
		t.Fatal(perr)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "data: 1\n\ndata: [DONE]\n\n" {
		t.Fatalf("stream %q", b)
	}
}

// A connection idle in the pool for longer than the timeout is not
// waiting for anything: the watch leaves it, and the next request goes
// out on it. Once the client lets its connections go, the watch holds
// none and schedules no sweep.
func TestSilenceWatchLeavesIdleConnections(t *testing.T) {
	srv, _ := silentUpstream(t)
	const timeout = 150 * time.Millisecond
	c := NewHTTPClient(timeout)
	watch := c.Transport.(*upstreamTransport).watch
	send := func() (reused bool) {
		t.Helper()
		// A trace of the caller's own, to see the connection reused.
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
	time.Sleep(3 * timeout) // many sweeps
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
// and once the client lets its connections go the watch holds none.
func TestSilenceWatchConcurrent(t *testing.T) {
	srv, release := silentUpstream(t)
	const timeout = 250 * time.Millisecond
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
			_, perr := post(c, srv.URL+"/v1/x", body)
			var se *SilenceError
			switch {
			case body == "hold" && !errors.As(perr, &se):
				errs <- "a silent request: " + errString(perr)
			case body == "answer" && perr != nil:
				errs <- "an answered request: " + perr.Error()
			}
		})
	}
	wg.Wait()
	release()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// A dial the transport began for a request another connection served
	// may still end after the requests: let go until none is left.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c.CloseIdleConnections()
		n, sweeping := watch.holds()
		if n == 0 && !sweeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch holds %d connections (sweeping %v) after all closed", n, sweeping)
		}
	}
}

func errString(e *Error) string {
	if e == nil {
		return "no error"
	}
	return e.Error()
}

// A connection's wait step by step, with the sweep called by hand: a
// write starts it, the final answer's headers read whole end it; the
// sweep closes a connection only once it has waited the whole timeout,
// and a read or write on it then fails with the watch's error; what is
// written after the answer's headers starts no wait, the next request
// does.
func TestWatchedConnWaits(t *testing.T) {
	w := newSilenceWatch(time.Hour) // its own sweep is a second away: the test sweeps first
	client, server := net.Pipe()
	defer server.Close()
	conn, err := w.dial(func(context.Context, string, string) (net.Conn, error) { return client, nil })(context.Background(), "tcp", "x")
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(*watchedConn)
	write := func(s string) {
		t.Helper()
		go func() { _, _ = io.ReadFull(server, make([]byte, len(s))) }()
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(s string) {
		t.Helper()
		go func() { _, _ = io.WriteString(server, s) }()
		if _, err := io.ReadFull(c, make([]byte, len(s))); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func(want bool) {
		t.Helper()
		if got := c.waiting.Load() != 0; got != want {
			t.Fatalf("waiting %v, want %v", got, want)
		}
	}
	write("POST /v1/x HTTP/1.1\r\nHost: x\r\n\r\n")
	waiting(true)
	read("HTTP/1.1 100 Continue\r\n\r\n") // an interim answer
	waiting(true)
	write("{\"body\":1}")
	read("HTTP/1.1 200 OK\r\n")
	waiting(true)
	read("Content-Length: 2\r\n\r\nok")
	waiting(false)
	write("more of the body, after the answer")
	waiting(false)

	// An answer's header blocks cut across reads, with the body written
	// between them: the writes neither make Read forget what it read of a
	// block nor take the 100 for the final answer.
	write("POST /v1/x HTTP/1.1\r\nHost: x\r\n\r\n")
	read("HTTP/1.1 1")
	write("{\"body\":")
	read("00 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
	waiting(true)
	write("2}")
	read("\r\n")
	waiting(false)
	write("I have /a dream\r\n") // the body, after the answer, looking like a request
	waiting(false)

	write("POST /v1/x HTTP/1.1\r\nHost: x\r\n\r\n") // the next request
	waiting(true)
	// Waiting, but not yet for the whole timeout: the sweep leaves it.
	c.waiting.Store(clock() - int64(time.Hour-time.Minute))
	w.sweep()
	waiting(true)
	// Waiting for the whole timeout: closed, and its reads and writes say why.
	c.waiting.Store(clock() - int64(time.Hour))
	w.sweep()
	var se *SilenceError
	if _, err := c.Read(make([]byte, 1)); !errors.As(err, &se) || se.After != time.Hour {
		t.Fatalf("read after the sweep: %v", err)
	}
	if _, err := c.Write([]byte("x")); !errors.As(err, &se) {
		t.Fatalf("write after the sweep: %v", err)
	}
	if n, sweeping := w.holds(); n != 0 || sweeping {
		t.Errorf("the watch holds %d (sweeping %v) after closing its one connection", n, sweeping)
	}
}

// Headers read just after the sweep took the connection are not given:
// the request fails as if they had not come, not with its headers in
// hand and its body cut.
func TestWatchedConnLateHeadersFail(t *testing.T) {
	w := newSilenceWatch(time.Hour)
	var c *watchedConn
	late := lateConn{answer: "HTTP/1.1 200 OK\r\n\r\nok", before: func() { c.waiting.Store(silenced) }}
	c = &watchedConn{Conn: late, watch: w}
	c.waiting.Store(clock())
	n, err := c.Read(make([]byte, 64))
	var se *SilenceError
	if n != 0 || !errors.As(err, &se) {
		t.Fatalf("read %d bytes, %v; want none and the watch's error", n, err)
	}
}

// lateConn answers one read, after calling before (the sweep, in the
// test).
type lateConn struct {
	net.Conn
	answer string
	before func()
}

func (l lateConn) Read(p []byte) (int, error) {
	l.before()
	return copy(p, l.answer), nil
}

// The end of a final answer's headers is found however the answer is cut
// into reads: at the read that brings its blank line's last byte, never
// before, past any interim answer, with CRLF or bare line feeds; and a
// new wait forgets what the last one read.
func TestHeadersReadInAnyReads(t *testing.T) {
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nA: b\r\n\r\n{\"x\":\"\r\n\r\n\"}",
		"HTTP/1.1 200 OK\nA: b\n\ndata: 1\n\n",
		"HTTP/1.1 200 OK\r\nA: b\r\n\ndata",
		"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n\r\nok",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n...",
	} {
		// Where the final answer's headers end.
		final := strings.LastIndex(answer, "HTTP/1.1 ")
		if strings.HasPrefix(answer[final:], "HTTP/1.1 101") {
			final = 0
		}
		end := final + min(idx(answer[final:], "\n\n")+2, idx(answer[final:], "\n\r\n")+3)
		check := func(cuts []int) {
			t.Helper()
			c := &watchedConn{}
			from := 0
			for i, to := range append(cuts, len(answer)) {
				got := c.headersRead(1, []byte(answer[from:to]))
				if want := from < end && end <= to; got != want {
					t.Fatalf("%q cut at %v: read %d (%q) ends the headers: %v, want %v", answer, cuts, i, answer[from:to], got, want)
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
	}
	// "\r\n" read in one wait and "\r\n" in the next is no blank line.
	c := &watchedConn{}
	if c.headersRead(1, []byte("HTTP/1.1 200 OK\r\n")) || c.headersRead(2, []byte("\r\n")) {
		t.Error("a blank line made of two waits' reads")
	}
}

// idx is strings.Index, with no match as far past the end.
func idx(s, sub string) int {
	if i := strings.Index(s, sub); i >= 0 {
		return i
	}
	return 1 << 30
}

// What begins a request, as Go's transport writes it, and what does not:
// a body written after an early answer may begin with anything.
func TestRequestLine(t *testing.T) {
	for p, want := range map[string]bool{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n":      true,
		"DELETE /v1/x HTTP/1.1\r\n":                              true,
		"M-SEARCH /x HTTP/1.1\r\n":                               true,
		"POST http://10.0.0.5:8000/v1/x HTTP/1.1\r\nHost: x\r\n": true,
		"{\"model\":\"gpt-4o\"}":                                 false,
		"POST":                                                   false,
		"POST /v1/chat/completions":                              false,
		" /x HTTP/1.1\r\n":                                       false,
		"I have /a dream\r\n":                                    false,
		"I have heard, \"POST /x HTTP/1.1\r\n\"":                 false,
		strings.Repeat("A", 40) + " /x HTTP/1.1\r\n":             false,
	} {
		if got := requestLine([]byte(p)); got != want {
			t.Errorf("%q: %v, want %v", p, got, want)
		}
	}
}
