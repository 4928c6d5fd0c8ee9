// Package tests holds tollgate's end-to-end tests: a real
// DynamoDB-compatible engine (DynamoDB Local, started by `make test`),
// httptest upstreams, and the official SDK clients.
package tests

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/providers"
	"github.com/tollgate/tollgate/providers/mock"
)

// tcpProxy forwards connections to a target until stopped, so a test can
// take the engine away from the gateway mid-test: Stop refuses and resets
// (the engine gone), Stall accepts and never answers (the engine stopped
// with SIGSTOP, a partition) until Resume.
type tcpProxy struct {
	l       net.Listener
	target  string
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
	stalled atomic.Bool
	resumed chan struct{} // closed by Resume
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l, target: target, resumed: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.Stop)
	return p
}

// Stall makes the engine stop answering: connections are still accepted,
// bytes are read, and nothing is forwarded either way.
func (p *tcpProxy) Stall() {
	p.mu.Lock()
	p.resumed = make(chan struct{})
	p.mu.Unlock()
	p.stalled.Store(true)
}

// Resume ends a stall: what was held goes through.
func (p *tcpProxy) Resume() {
	p.stalled.Store(false)
	p.mu.Lock()
	close(p.resumed)
	p.mu.Unlock()
}

// relay copies from src to dst, holding each chunk while stalled.
func (p *tcpProxy) relay(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for p.stalled.Load() {
				p.mu.Lock()
				wait := p.resumed
				p.mu.Unlock()
				<-wait
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) Addr() string { return p.l.Addr().String() }

func (p *tcpProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { p.relay(up, c) })
		p.wg.Go(func() { p.relay(c, up) })
	}
}

// Stop closes the listener and every connection: from then on the engine
// is unreachable (connections are refused). It ends a stall.
func (p *tcpProxy) Stop() {
	if p.stalled.Load() {
		p.Resume()
	}
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// countingProvider wraps a provider and counts the calls that reach it.
type countingProvider struct {
	providers.Provider
	calls atomic.Int64
}

func newCountingMock(name string) *countingProvider {
	return &countingProvider{Provider: mock.New(name, 0)}
}

func (c *countingProvider) Serve(ctx context.Context, w http.ResponseWriter, r *providers.Request) (providers.Result, error) {
	c.calls.Add(1)
	return c.Provider.Serve(ctx, w, r)
}

func (c *countingProvider) AcceptsAnyModel() bool { return true }

type openAIError struct {
	Message         string  `json:"message"`
	Type            string  `json:"type"`
	Code            *string `json:"code"`
	GatewayDecision string  `json:"gateway_decision"`
}

func decodeOpenAIError(t *testing.T, body []byte) openAIError {
	t.Helper()
	var e struct {
		Error openAIError `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return e.Error
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
