package providers

import (
	"bytes"
	"context"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The wait for an upstream's answer is bounded in one of two ways
// (NewHTTPClient):
//
//   - a request that Go's transport may send again (a GET, or one with an
//     Idempotency-Key), any request over https, where HTTP/2 carries many
//     requests on one connection, and any through a proxy spoken to over
//     TLS, by the transport's ResponseHeaderTimeout: a timer started for
//     each request;
//   - any other request over plain HTTP/1, one at a time on its
//     connection, by a silence watch: the connection notes when the
//     request was last written to it, and that it is waiting, until it has
//     read the answer's headers (past any 1xx answer); one sweep a few
//     times a timeout closes the connections that have been waiting
//     longer than the timeout, which fails their requests with a timeout,
//     as the timer would.
//
// The watch costs no timer per request, nor anything the transport
// allocates or calls per request (a trace of each request, to learn its
// connection, cost as much as the timer): the transport's timer was a
// tenth of the gateway's overhead over a bare reverse proxy's in
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

// CloseIdleConnections closes both transports' idle connections (what
// http.Client.CloseIdleConnections asks of its transport).
func (t *upstreamTransport) CloseIdleConnections() {
	t.watched.CloseIdleConnections()
	t.timed.CloseIdleConnections()
}

// watches reports whether r goes through the watch: a request it can
// watch (watchable), over a connection that carries it in the clear (no
// proxy, or one spoken to in plain HTTP: through one spoken to over TLS,
// the watch would read ciphertext).
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
// for an answer's headers for longer than timeout. It sweeps them every
// `every` while it has any.
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
// their Close returns). A connection is taken from its wait in one
// compare-and-swap, which the answer's headers read in time, or the
// next request written, would have won instead: never both
// (TestWatchedConnWaits, TestWatchedConnLateHeadersFail).
func (w *silenceWatch) sweep() {
	now := clock()
	var silent []*watchedConn
	w.mu.Lock()
	for c := range w.conns {
		if since := c.waiting.Load(); since != 0 && since != silenced && now-since >= int64(w.timeout) && c.waiting.CompareAndSwap(since, silenced) {
			silent = append(silent, c)
		}
	}
	if w.scheduled = len(w.conns) > 0; w.scheduled {
		w.timer.Reset(w.every)
	}
	w.mu.Unlock()
	for _, c := range silent {
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

// silenced is a watchedConn's waiting once the sweep has taken it: no
// reading of the clock.
const silenced = math.MinInt64

// watchedConn is a connection a silenceWatch watches.
type watchedConn struct {
	net.Conn
	watch *silenceWatch
	// waiting is when a request was last written to the connection with
	// its answer's headers not read since (clock), 0 when none waits,
	// silenced once the sweep took it. It is set before the write, so
	// that the answer's reads always come after it.
	waiting atomic.Int64
	// answered: the headers of the answer to the request last begun have
	// been read. What is written after them (an upstream may answer
	// before it has read the whole body) starts no wait; the next
	// request, which begins with its request line, does.
	answered atomic.Bool
	// requests counts the requests begun on the connection (their request
	// lines written), for Read to know which answer it reads.
	requests atomic.Uint64
	closed   sync.Once
	// What Read has seen of the header block it is in, in the answer to
	// request blockOf: its first bytes (the status line says whether it is
	// a 1xx answer, after which the final one comes) and its last two (to
	// find the blank line that ends it across two reads). Read alone
	// touches them, and the transport's reads of a connection never
	// overlap.
	blockOf uint64
	head    [16]byte
	headN   int
	tail    [2]byte
	tailN   int
}

// Write starts the wait with every write of a request (before the write:
// see waiting), so a write the upstream does not take for the timeout (an
// upload it stops reading) fails too, where the transport's timer began
// only once the request was written. The connection has no ReadFrom of its own (a
// *net.TCPConn's would send a body around Write): every byte sent
// passes here.
func (c *watchedConn) Write(p []byte) (int, error) {
	begins := requestLine(p)
	if begins {
		// Only a new request forgets the last answer.
		c.requests.Add(1)
		c.answered.Store(false)
	}
	if begins || !c.answered.Load() {
		now := clock()
		if !c.wait(now) {
			return 0, c.silence() // closed by the sweep
		}
		if !begins && c.answered.Load() {
			c.waiting.CompareAndSwap(now, 0) // the headers came in between
		}
	}
	n, err := c.Conn.Write(p)
	return n, c.why(err)
}

// Read ends the wait once the answer's headers have been read whole, as
// the transport's ResponseHeaderTimeout would: a stream's pauses after
// that are not the watch's to bound.
//
// What is read once the sweep has taken the connection is not given: it
// can only be (part of) headers that came too late, and the request
// fails as it would have had they not come at all.
func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		since := c.waiting.Load()
		switch {
		case since == silenced:
			return 0, c.silence()
		case since != 0 && c.headersRead(c.requests.Load(), p[:n]):
			c.answered.Store(true)
			if !c.stopWaiting() {
				return 0, c.silence()
			}
		}
	}
	return n, c.why(err)
}

// wait starts the wait at now, unless the sweep has taken the connection
// (then false).
func (c *watchedConn) wait(now int64) bool {
	for {
		since := c.waiting.Load()
		if since == silenced {
			return false
		}
		if c.waiting.CompareAndSwap(since, now) {
			return true
		}
	}
}

// stopWaiting ends the wait, unless the sweep has taken the connection
// (then false). No next request can have begun one: the transport writes
// it only once this answer is read to its end.
func (c *watchedConn) stopWaiting() bool {
	for {
		switch since := c.waiting.Load(); {
		case since == silenced:
			return false
		case since == 0 || c.waiting.CompareAndSwap(since, 0):
			return true
		}
	}
}

// why gives the watch's error for what failed because the sweep closed
// the connection.
func (c *watchedConn) why(err error) error {
	if err != nil && c.waiting.Load() == silenced {
		return c.silence()
	}
	return err
}

// silence is the error of what fails on the connection once the sweep
// has taken it.
func (c *watchedConn) silence() error { return &SilenceError{After: c.watch.timeout} }

// headersRead reports whether b, read in the answer to request req after
// what was read before of it, ends the headers of a final answer:
// a header block, ended by a blank line (CRLF or, as Go's client also
// takes, a bare LF), whose status is not 1xx but 101 (the transport reads
// on past the others).
func (c *watchedConn) headersRead(req uint64, b []byte) bool {
	if c.blockOf != req {
		c.blockOf, c.headN, c.tailN = req, 0, 0
	}
	for {
		c.headN += copy(c.head[c.headN:], b)
		end := blankLineEnd(c.tail[:c.tailN], b)
		if end < 0 {
			var joint [4]byte
			k := copy(joint[:], c.tail[:c.tailN])
			k += copy(joint[k:], b[max(len(b)-2, 0):])
			c.tailN = copy(c.tail[:], joint[max(k-2, 0):k])
			return false
		}
		if !interim(c.head[:c.headN]) {
			return true
		}
		b, c.headN, c.tailN = b[end:], 0, 0 // the final answer's block follows
	}
}

// blankLineEnd returns where in b the first blank line ends (after
// tail, the last bytes read before b), or -1. A line ends with LF, or
// CRLF: a blank line is an LF followed by LF or CRLF. It looks at each
// line's end once, not at what follows the blank line.
func blankLineEnd(tail, b []byte) int {
	if n := len(tail); n > 0 && len(b) > 0 {
		switch {
		case tail[n-1] == '\n' && b[0] == '\n':
			return 1
		case tail[n-1] == '\n' && b[0] == '\r' && len(b) > 1 && b[1] == '\n':
			return 2
		case n > 1 && tail[n-2] == '\n' && tail[n-1] == '\r' && b[0] == '\n':
			return 1
		}
	}
	for at := 0; ; {
		i := bytes.IndexByte(b[at:], '\n')
		if i < 0 {
			return -1
		}
		i += at
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
		at = i + 1
	}
}

// interim reports whether a header block beginning with head is an
// interim answer: a 1xx status but 101, after "HTTP/x.y" and spaces.
func interim(head []byte) bool {
	if !bytes.HasPrefix(head, []byte("HTTP/")) {
		return false
	}
	i := bytes.IndexByte(head, ' ')
	for i >= 0 && i < len(head) && head[i] == ' ' {
		i++
	}
	if i < 0 || i+3 > len(head) {
		return false
	}
	code := head[i : i+3]
	return code[0] == '1' && string(code) != "101"
}

// requestLine reports whether p begins with a request line as Go's
// transport writes one, whole, at the start of the first write of a
// request: a method (a token), a space, a path or an absolute http URL
// with no space before its query (Go writes a raw query as it is given),
// and " HTTP/1.1" at the end of the line, in p (the transport's first
// write holds up to 4 KB of the request: the lines of the URLs an
// adapter sends fit in it).
func requestLine(p []byte) bool {
	method := 0
	for method < len(p) && method < 32 && token(p[method]) {
		method++
	}
	if method == 0 || method >= len(p) || p[method] != ' ' {
		return false
	}
	end := bytes.IndexByte(p, '\n')
	if end < method {
		return false
	}
	target, ok := bytes.CutSuffix(p[method+1:end], []byte(" HTTP/1.1\r"))
	if !ok || !(bytes.HasPrefix(target, []byte("/")) || bytes.HasPrefix(target, []byte("http://"))) {
		return false
	}
	path, _, _ := bytes.Cut(target, []byte("?"))
	return bytes.IndexByte(path, ' ') < 0
}

// token reports whether b may be in an HTTP method (RFC 9110's tchar).
func token(b byte) bool {
	return b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() { c.watch.remove(c) })
	return err
}

// SilenceError is the failure of a request whose upstream sent no
// answer's headers for the provider's timeout after it was sent. It is a
// timeout, as the transport's own is (context.DeadlineExceeded, which the
// gateway answers with 504) and as a connection's deadline is
// (os.ErrDeadlineExceeded).
type SilenceError struct{ After time.Duration }

func (e *SilenceError) Error() string {
	return "the upstream sent no answer's headers for " + e.After.String() + " after the request (the provider's timeout)"
}

// Is makes errors.Is hold for context.DeadlineExceeded and
// os.ErrDeadlineExceeded.
func (e *SilenceError) Is(target error) bool {
	return target == context.DeadlineExceeded || target == os.ErrDeadlineExceeded
}

// Timeout and Temporary make it a net.Error that is a timeout.
func (e *SilenceError) Timeout() bool   { return true }
func (e *SilenceError) Temporary() bool { return true }

// epoch is the start of clock's readings: a monotonic one.
var epoch = time.Now()

// clock is the time since epoch in nanoseconds, never 0 (0 is "not
// waiting").
func clock() int64 { return int64(time.Since(epoch)) | 1 }
