package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/gateway/proxy"
	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/providers"
	openaip "github.com/tollgate/tollgate/providers/openai"
)

// endlessStream is an upstream that streams chat chunks of 32 KiB until
// its client goes away.
func endlessStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	chunk := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("x", 32<<10) + `"},"finish_reason":null}]}` + "\n\n"
	for r.Context().Err() == nil {
		if _, err := io.WriteString(w, chunk); err != nil {
			return
		}
		http.NewResponseController(w).Flush()
	}
}

// Two clients that ask for a stream and never read it once held both
// slots of a concurrent=2 rule until they closed their sockets. Each write
// to a client now has a deadline: the stalled streams end, their slots are
// given back, and a third client gets in.
func TestClientsThatStopReadingLoseTheirSlots(t *testing.T) {
	up := newUpstream(t, endlessStream)
	p, err := openaip.New(openaip.Config{Name: "openai", BaseURL: up.URL + "/v1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 2}}})
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs})
	cat, err := providers.NewCatalog([]providers.Provider{p}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := proxy.New(proxy.Config{Limiter: l, Catalog: cat, StreamWriteTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	stall := func() net.Conn {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return c // never read
	}
	a, b := stall(), stall()
	defer a.Close()
	defer b.Close()
	third := func() int {
		res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode == 200 {
			// Read a little, then leave: this test is about the others.
			_, _ = bufio.NewReader(res.Body).Peek(1024)
		}
		return res.StatusCode
	}
	// While both stalled streams still hold their slots, a third is refused.
	time.Sleep(50 * time.Millisecond)
	if code := third(); code != 429 {
		t.Fatalf("third client while two hold the slots: %d, want 429", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for third() != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the stalled clients still hold both slots 10 s later")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The local server cuts off a client that trickles its request and one
// that holds an idle connection; measured here with the server's timeouts
// scaled down, the real ones checked as configured.
func TestLocalServerTimeouts(t *testing.T) {
	srv := app.LocalServer("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	if srv.ReadHeaderTimeout != app.ReadHeaderTimeout || srv.ReadTimeout != app.ReadTimeout || srv.IdleTimeout != app.IdleTimeout ||
		srv.ReadTimeout > 60*time.Second || srv.IdleTimeout > 60*time.Second {
		t.Fatalf("local server timeouts %v %v %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout)
	}
	srv.ReadTimeout, srv.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())

	// A body at one byte every 100 ms: cut off at the read timeout.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	start := time.Now()
	closed := false
	for i := 0; i < 50 && !closed; i++ {
		if _, err := c.Write([]byte("x")); err != nil {
			closed = true
			break
		}
		time.Sleep(100 * time.Millisecond)
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			closed = true
		}
	}
	if !closed || time.Since(start) > 3*time.Second {
		t.Fatalf("a trickling body was still being read after %v", time.Since(start))
	}

	// An idle keep-alive connection is closed at the idle timeout.
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	rd := bufio.NewReader(c2)
	res, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	_ = c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	start = time.Now()
	if _, err := rd.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("an idle connection stayed open %v (%v)", time.Since(start), err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A stream longer than the lease's TTL keeps its slot: the gateway renews
// the lease while the request runs. Before, the lease expired under it and
// a second request took the only slot.
func TestLongStreamKeepsItsSlot(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for range 30 { // 3 s
			fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`+"\n\n")
			http.NewResponseController(w).Flush()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	p, _ := openaip.New(openaip.Config{Name: "openai", BaseURL: up.URL + "/v1", APIKey: "k"})
	rs, _ := limiter.NewRules([]limiter.Rule{{Scope: limiter.ScopeUserPath, Subject: "/", Limit: limiter.Gauge{MaxInFlight: 1}}})
	l, _ := limiter.New(limiter.Config{Store: memstore.New(), Rules: rs, LeaseTTL: 600 * time.Millisecond})
	cat, _ := providers.NewCatalog([]providers.Provider{p}, nil, nil)
	h, _ := proxy.New(proxy.Config{Limiter: l, Catalog: cat})
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	done := make(chan int64, 1)
	start := time.Now()
	go func() {
		res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			done <- -1
			return
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		done <- n
	}()
	for _, at := range []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond, 2500 * time.Millisecond} {
		time.Sleep(time.Until(start.Add(at)))
		res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 429 {
			t.Fatalf("a second request at about %v into a 3 s stream on a lease of 600 ms: %d, want 429", at, res.StatusCode)
		}
	}
	if n := <-done; n <= 0 {
		t.Fatal("the long stream did not finish")
	}
}
