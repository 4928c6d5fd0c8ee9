package providers

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The wait for an upstream's answer is bounded in one of two ways
// (NewHTTPClient):
//
//   - a request that Go's transport may send again (a GET, or one with an
//     Idempotency-Key), and any request over https, where HTTP/2 carries
//     many requests on one connection, by the transport's
//     ResponseHeaderTimeout: a timer started for each request;
//   - any other request over plain HTTP (straight, or through a proxy
//     spoken to in plain HTTP), one at a time on its connection, by a
//     silence watch: the connection notes when it was last written
//     to with no answer's headers read back since, and one sweep a few
//     times a timeout closes those that have been waiting longer than the
//     timeout.
//
// The watch costs no timer per request: the transport's was a tenth of
// the gateway's overhead over a bare reverse proxy's in
// BenchmarkGatewayVsReverseProxy (docs/benchmarks.md).
// A request the transport may send again is left to the timer because
// the transport resends it, once, on a new connection after an old one
// breaks while it waits: a silent upstream would be waited for twice.

// upstreamTransport sends each request through watched or timed (see
// above).
type upstreamTransport struct {
	watched, timed *http.Transport
	watch          *silenceWatch // watched's
}

func (t *upstreamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.watches(r) {
		return t.watched.RoundTrip(r)
	}
	return t.timed.RoundTrip(r)
}

// watches reports whether r goes through the watch: a request it can
// watch, whose bytes it reads in the clear (no proxy, or one spoken to in
// plain HTTP; through an https proxy it would see only ciphertext).
func (t *upstreamTransport) watches(r *http.Request) bool {
	if !watchable(r) {
		return false
	}
	if t.watched.Proxy == nil {
		return true
	}
	proxy, err := t.watched.Proxy(r)
	return err == nil && (proxy == nil || proxy.Scheme == "http")
}

// CloseIdleConnections closes both transports' idle connections (what
// http.Client.CloseIdleConnections asks of its transport).
func (t *upstreamTransport) CloseIdleConnections() {
	t.watched.CloseIdleConnections()
	t.timed.CloseIdleConnections()
}

// watchable reports whether r goes over plain HTTP/1 and is a request Go's
// transport never sends twice (http.Request.isReplayable's rule).
func watchable(r *http.Request) bool {
	if r.URL.Scheme != "http" {
		return false
	}
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	_, idem := r.Header["Idempotency-Key"]
	_, xidem := r.Header["X-Idempotency-Key"]
	return !idem && !xidem
}

// silenceWatch closes the connections it dialled that have been waiting
// for an answer for longer than timeout: written to, with no answer's
// headers read since. It sweeps them every `every` while it has any.
type silenceWatch struct {
	timeout, every time.Duration

	mu        sync.Mutex
	conns     map[*watchedConn]struct{}
	timer     *time.Timer // sweeps
	scheduled bool        // the timer is set: there are connections
}

// newSilenceWatch returns a watch that closes a connection after timeout
// of waiting, within an eighth of it (at most a second) more.
func newSilenceWatch(timeout time.Duration) *silenceWatch {
	return &silenceWatch{
		timeout: timeout,
		every:   min(max(timeout/8, time.Millisecond), time.Second),
		conns:   make(map[*watchedConn]struct{}),
	}
}

// dial wraps a transport's dial: the connections it makes are watched.
func (w *silenceWatch) dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		wc := &watchedConn{Conn: c, watch: w}
		w.add(wc)
		return wc, nil
	}
}

func (w *silenceWatch) add(c *watchedConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conns[c] = struct{}{}
	switch {
	case w.scheduled:
	case w.timer == nil:
		w.timer = time.AfterFunc(w.every, w.sweep)
	default:
		w.timer.Reset(w.every)
	}
	w.scheduled = true
}

func (w *silenceWatch) remove(c *watchedConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.conns, c)
	if len(w.conns) == 0 && w.scheduled {
		w.timer.Stop() // a sweep already under way finds none and stops
		w.scheduled = false
	}
}

// sweep closes the connections that have waited too long, and schedules
// the next sweep while there are connections (those it closes leave as
// their Close returns).
func (w *silenceWatch) sweep() {
	now := clock()
	var silent []*watchedConn
	w.mu.Lock()
	for c := range w.conns {
		if since := c.waiting.Load(); since != 0 && now-since >= int64(w.timeout) {
			silent = append(silent, c)
		}
	}
	if w.scheduled = len(w.conns) > 0; w.scheduled {
		w.timer.Reset(w.every)
	}
	w.mu.Unlock()
	for _, c := range silent {
		c.silenced.Store(true)
		_ = c.Close()
	}
}

// holds returns how many connections the watch holds and whether a sweep
// is scheduled (for tests).
func (w *silenceWatch) holds() (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.conns), w.scheduled
}

// watchedConn is a connection a silenceWatch watches.
type watchedConn struct {
	net.Conn
	watch *silenceWatch
	// waiting is when the connection was last written to with no answer's
	// headers read since (clock), 0 when it is not waiting. It is set
	// before the write, so that the answer's reads always come after it.
	waiting  atomic.Int64
	silenced atomic.Bool // closed by the watch
	closed   sync.Once
	// What Read has seen of the answer it waits for, which arrives in any
	// number of reads: the last bytes of it (up to 3, to find the blank
	// line after the headers across two reads), for the wait that began
	// at tailOf. Read alone touches them (the transport reads a
	// connection from one goroutine).
	tail   [3]byte
	tailN  int
	tailOf int64
}

// Write starts the wait again with every write. The connection has no
// ReadFrom of its own (a *net.TCPConn's would send a body around Write):
// every byte sent passes here.
func (c *watchedConn) Write(p []byte) (int, error) {
	c.waiting.Store(clock())
	return c.Conn.Write(p)
}

// Read ends the wait once the answer's headers have been read whole, as
// the transport's ResponseHeaderTimeout would: a stream's pauses after
// that are not the watch's to bound.
func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if since := c.waiting.Load(); since != 0 && c.headersEnd(since, p[:n]) {
			c.waiting.CompareAndSwap(since, 0)
		}
	}
	if err != nil && c.silenced.Load() {
		err = &SilenceError{After: c.watch.timeout}
	}
	return n, err
}

// headersEnd reports whether b, read in the wait that began at since
// after what was read before in it, holds the blank line that ends an
// answer's headers.
func (c *watchedConn) headersEnd(since int64, b []byte) bool {
	const blank = "\r\n\r\n"
	if c.tailOf != since {
		c.tailOf, c.tailN = since, 0
	}
	if c.tailN > 0 {
		var joint [6]byte
		k := copy(joint[:], c.tail[:c.tailN])
		k += copy(joint[k:], b)
		if bytes.Contains(joint[:k], []byte(blank)) {
			return true
		}
	}
	if bytes.Contains(b, []byte(blank)) {
		return true
	}
	if len(b) >= len(c.tail) {
		c.tailN = copy(c.tail[:], b[len(b)-len(c.tail):])
	} else {
		var keep [6]byte
		k := copy(keep[:], c.tail[:c.tailN])
		k += copy(keep[k:], b)
		c.tailN = copy(c.tail[:], keep[max(k-len(c.tail), 0):k])
	}
	return false
}

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() { c.watch.remove(c) })
	return err
}

// SilenceError is the failure of a request whose upstream sent no
// answer's headers for the provider's timeout after it was sent. It is a timeout
// (os.ErrDeadlineExceeded), as the transport's own would be.
type SilenceError struct{ After time.Duration }

func (e *SilenceError) Error() string {
	return "the upstream sent no answer for " + e.After.String() + " after the request (the provider's timeout)"
}

// Is makes errors.Is(err, os.ErrDeadlineExceeded) hold.
func (e *SilenceError) Is(target error) bool { return target == os.ErrDeadlineExceeded }

// Timeout and Temporary make it a net.Error that is a timeout.
func (e *SilenceError) Timeout() bool   { return true }
func (e *SilenceError) Temporary() bool { return true }

// epoch is the start of clock's readings: a monotonic one.
var epoch = time.Now()

// clock is the time since epoch in nanoseconds, never 0 (0 is "not
// waiting").
func clock() int64 { return int64(time.Since(epoch)) | 1 }
