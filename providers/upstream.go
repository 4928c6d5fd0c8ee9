package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/providers/jsonx"
)

// MaxErrorBody bounds how much of an upstream error body is kept.
const MaxErrorBody = 64 << 10

// NewHTTPClient returns the client an adapter calls its upstream with.
// headerTimeout bounds the wait for the answer after the request is sent
// (a non-streaming answer sends its headers only when it is complete):
// the transport's ResponseHeaderTimeout, or the silence watch over plain
// HTTP (silence.go); nothing bounds a stream once it flows, but the
// caller's context.
func NewHTTPClient(headerTimeout time.Duration) *http.Client {
	if headerTimeout <= 0 {
		headerTimeout = 5 * time.Minute
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	transport := func() *http.Transport {
		return &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	timed, watched := transport(), transport()
	timed.ResponseHeaderTimeout = headerTimeout
	watch := newSilenceWatch(headerTimeout)
	watched.DialContext = watch.dial(dialer.DialContext)
	if os.Getenv("HTTP_PROXY") == "" && os.Getenv("http_proxy") == "" {
		// No proxy for plain HTTP (what ProxyFromEnvironment reads for
		// it): neither the transport nor the watch need ask each request.
		watched.Proxy = nil
	}
	return &http.Client{Transport: &upstreamTransport{watched: watched, timed: timed, watch: watch}}
}

// Send sends req and returns the response when its status is 2xx. Any other
// outcome is an *Error with nothing written to the client: a transport
// failure or timeout (Status 0), or an error status with its body (at most
// MaxErrorBody) and the rate-limit headers parsed.
//
// The client's transport is called straight when the client would add
// nothing to the request (no timeout, cookie jar or redirect policy of
// its own, no user and password in the URL), which spares a copy of the
// headers and a timer per request; a redirect is then followed as the
// client follows it (TestSendFollowsRedirects).
func Send(client *http.Client, provider string, req *http.Request) (*http.Response, *Error) {
	resp, err := roundTrip(client, req)
	if err != nil {
		return nil, &Error{Provider: provider, Err: err}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	resp.Body.Close()
	e := &Error{
		Provider: provider,
		Status:   resp.StatusCode,
		Body:     body,
		Header:   resp.Header.Clone(),
		Limits:   ParseLimits(resp.Header, time.Now()),
		Err:      errors.New(http.StatusText(resp.StatusCode)),
	}
	if d := retryDelayFromBody(body); d > e.Limits.RetryAfter {
		e.Limits.RetryAfter = d
	}
	return nil, e
}

// roundTrip sends req as client.Do does: straight to the client's
// transport when the client would add nothing to it (see Send), through
// client.Do otherwise or when the upstream redirects.
func roundTrip(client *http.Client, req *http.Request) (*http.Response, error) {
	if client.Timeout != 0 || client.Jar != nil || client.CheckRedirect != nil || req.URL.User != nil {
		return client.Do(req)
	}
	rt := client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.Body == nil {
		resp.Body = http.NoBody // as the client guarantees
	}
	if !redirected(resp.StatusCode) {
		return resp, nil
	}
	// Rare: let the client follow the redirect from the answer in hand,
	// as it follows any (the method it keeps or changes, the body sent
	// again or the 3xx returned when it cannot be, credentials dropped
	// on the way to another host, its limit of hops), without sending the
	// request to where it was sent once more: the client's first round
	// trip is that answer.
	a := &answered{resp: resp, rt: rt}
	follow := *client
	follow.Transport = a
	resp, err = follow.Do(req)
	if a.used.CompareAndSwap(false, true) {
		a.resp.Body.Close() // the client turned the request away before its first round trip
	}
	return resp, err
}

// answered is a transport whose first round trip is an answer already
// received; the ones after go out through rt.
type answered struct {
	resp *http.Response
	rt   http.RoundTripper
	used atomic.Bool
}

func (a *answered) RoundTrip(req *http.Request) (*http.Response, error) {
	if a.used.CompareAndSwap(false, true) {
		if req.Body != nil {
			req.Body.Close() // a transport closes the body it is given
		}
		a.resp.Request = req
		return a.resp, nil
	}
	return a.rt.RoundTrip(req)
}

// redirected reports whether status is one client.Do follows.
func redirected(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// ParseLimits reads a provider's rate-limit headers: OpenAI's and Azure's
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}, Anthropic's
// anthropic-ratelimit-*, and retry-after / retry-after-ms. now turns
// Anthropic's reset timestamps and HTTP dates into durations; the zero
// time is the clock's time, read only when a header needs it.
func ParseLimits(h http.Header, now time.Time) UpstreamLimits {
	clock := func() time.Time {
		if now.IsZero() {
			now = time.Now()
		}
		return now
	}
	var v limitValues
	v.read(h)
	l := UpstreamLimits{RemainingRequests: -1, RemainingTokens: -1, LimitRequests: -1, LimitTokens: -1}
	if s := v[retryAfterMs]; s != "" {
		if ms, err := strconv.ParseFloat(s, 64); err == nil && ms >= 0 {
			l.RetryAfter = time.Duration(ms * float64(time.Millisecond))
		}
	}
	if s := v[retryAfter]; s != "" && l.RetryAfter == 0 {
		if secs, err := strconv.ParseFloat(s, 64); err == nil && secs >= 0 {
			l.RetryAfter = time.Duration(secs * float64(time.Second))
		} else if t, err := http.ParseTime(s); err == nil {
			l.RetryAfter = max(0, t.Sub(clock()))
		}
	}
	l.LimitRequests = intValue(v[limitRequests], v[anthropicLimitRequests])
	l.LimitTokens = intValue(v[limitTokens], v[anthropicLimitTokens])
	l.RemainingRequests = intValue(v[remainingRequests], v[anthropicRemainingRequests])
	l.RemainingTokens = intValue(v[remainingTokens], v[anthropicRemainingTokens])
	l.ResetRequests = resetValue(clock, v[resetRequests], v[anthropicResetRequests])
	l.ResetTokens = resetValue(clock, v[resetTokens], v[anthropicResetTokens])
	return l
}

// limitValues are the values of the headers ParseLimits reads, each the
// first of its header's, "" for a header the answer has not.
type limitValues [limitHeaders]string

const (
	retryAfterMs = iota
	retryAfter
	limitRequests
	anthropicLimitRequests
	limitTokens
	anthropicLimitTokens
	remainingRequests
	anthropicRemainingRequests
	remainingTokens
	anthropicRemainingTokens
	resetRequests
	anthropicResetRequests
	resetTokens
	anthropicResetTokens
	limitHeaders
)

// read takes the values from h in one pass over its headers (an answer
// has a handful, or a score with a provider's own; a dozen lookups of
// names it mostly lacks cost more), by their canonical names.
func (v *limitValues) read(h http.Header) {
	for name, vs := range h {
		i := -1
		switch name {
		case "Retry-After-Ms":
			i = retryAfterMs
		case "Retry-After":
			i = retryAfter
		case "X-Ratelimit-Limit-Requests":
			i = limitRequests
		case "Anthropic-Ratelimit-Requests-Limit":
			i = anthropicLimitRequests
		case "X-Ratelimit-Limit-Tokens":
			i = limitTokens
		case "Anthropic-Ratelimit-Tokens-Limit":
			i = anthropicLimitTokens
		case "X-Ratelimit-Remaining-Requests":
			i = remainingRequests
		case "Anthropic-Ratelimit-Requests-Remaining":
			i = anthropicRemainingRequests
		case "X-Ratelimit-Remaining-Tokens":
			i = remainingTokens
		case "Anthropic-Ratelimit-Tokens-Remaining":
			i = anthropicRemainingTokens
		case "X-Ratelimit-Reset-Requests":
			i = resetRequests
		case "Anthropic-Ratelimit-Requests-Reset":
			i = anthropicResetRequests
		case "X-Ratelimit-Reset-Tokens":
			i = resetTokens
		case "Anthropic-Ratelimit-Tokens-Reset":
			i = anthropicResetTokens
		}
		if i >= 0 && len(vs) > 0 {
			v[i] = vs[0]
		}
	}
}

// HeaderValue is h.Get(name) for a name written canonically, without
// canonicalizing it again.
func HeaderValue(h http.Header, name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// intValue reads the first of values that is set and an integer; -1 when
// none is.
func intValue(values ...string) int64 {
	for _, s := range values {
		if s == "" {
			continue
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return -1
}

// resetValue reads the first of values that is a reset: as OpenAI writes
// it ("1s", "6m0s", "20ms"), as seconds, or as Anthropic's RFC 3339
// timestamp.
func resetValue(now func() time.Time, values ...string) time.Duration {
	for _, s := range values {
		if s == "" {
			continue
		}
		if d, err := time.ParseDuration(s); err == nil {
			return max(0, d)
		}
		if secs, err := strconv.ParseFloat(s, 64); err == nil {
			return time.Duration(secs * float64(time.Second))
		}
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return max(0, t.Sub(now()))
		}
	}
	return 0
}

// retryDelayFromBody reads Gemini's google.rpc.RetryInfo retryDelay ("12s")
// from an error body.
func retryDelayFromBody(body []byte) time.Duration {
	if !bytes.Contains(body, []byte("retryDelay")) {
		return 0
	}
	var e struct {
		Error struct {
			Details []struct {
				Type       string `json:"@type"`
				RetryDelay string `json:"retryDelay"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return 0
	}
	for _, d := range e.Error.Details {
		if strings.HasSuffix(d.Type, "RetryInfo") {
			if v, err := time.ParseDuration(d.RetryDelay); err == nil {
				return v
			}
		}
	}
	return 0
}

// jsonContentType is the Content-Type of a JSON body, shared by every
// request that names none (a slice of one: an Add copies it).
var jsonContentType = []string{"application/json"}

// forwarded are the client headers passed upstream; credentials never are.
var forwarded = []string{"Content-Type", "Accept", "Openai-Beta", "Anthropic-Version", "Anthropic-Beta"}

// NewRequest builds an upstream request carrying body (none for GET, HEAD
// and DELETE) and the client headers worth forwarding.
func NewRequest(ctx context.Context, method, url string, body []byte, client http.Header) (*http.Request, error) {
	return newRequest(ctx, method, url, nil, body, client)
}

// NewRequestTo is NewRequest to a URL already parsed (URLCache.Parse),
// which the request then owns.
func NewRequestTo(ctx context.Context, method string, u *url.URL, body []byte, client http.Header) (*http.Request, error) {
	return newRequest(ctx, method, "", u, body, client)
}

// newRequest builds the request of NewRequest to raw, or to parsed when
// it is set.
func newRequest(ctx context.Context, method, raw string, parsed *url.URL, body []byte, client http.Header) (*http.Request, error) {
	if method == http.MethodGet || method == http.MethodHead || method == http.MethodDelete {
		body = nil
	}
	var req *http.Request
	if parsed != nil && method == http.MethodPost && ctx != nil {
		req = newPost(ctx, parsed, body)
	} else {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		var err error
		if req, err = http.NewRequestWithContext(ctx, method, raw, rd); err != nil {
			return nil, err
		}
		if parsed != nil {
			parsed.Host = strings.TrimSuffix(parsed.Host, ":") // as NewRequest does
			req.URL, req.Host = parsed, parsed.Host
		}
	}
	// Canonical names read and written as they are; the client's value
	// slices shared (one of each), not copied.
	for _, k := range forwarded {
		if vs := client[k]; len(vs) > 0 && vs[0] != "" {
			req.Header[k] = vs[:1:1]
		}
	}
	if body != nil && HeaderValue(req.Header, "Content-Type") == "" {
		req.Header["Content-Type"] = jsonContentType
	}
	return req, nil
}

// newPost is the POST of body to u that http.NewRequestWithContext
// makes, built without parsing an empty URL to replace it or growing a
// header map made empty: the request every chat sends (a quarter to a
// third less time than through NewRequestWithContext;
// TestNewPostIsNewRequest).
func newPost(ctx context.Context, u *url.URL, body []byte) *http.Request {
	u.Host = strings.TrimSuffix(u.Host, ":") // as NewRequest does
	r := http.Request{
		Method: http.MethodPost, URL: u, Host: u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, 4),
	}
	switch {
	case len(body) > 0:
		r.ContentLength = int64(len(body))
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	case body != nil:
		r.Body = http.NoBody
		r.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return r.WithContext(ctx)
}

// URLCache keeps the parsed form of up to maxCachedURLs of an adapter's
// upstream URLs (its base URL and an operation's path: a handful), so
// that a request does not parse its URL again. Safe for concurrent use.
type URLCache struct {
	m sync.Map // urlKey → *url.URL, never changed once stored
	n atomic.Int32
}

// urlKey is a URL as the two strings it is joined from, so that a lookup
// does not join them.
type urlKey struct{ base, path string }

const maxCachedURLs = 64

// Parse returns a copy of base + path parsed, the caller's to change.
func (c *URLCache) Parse(base, path string) (*url.URL, error) {
	key := urlKey{base, path}
	if v, ok := c.m.Load(key); ok {
		u := *v.(*url.URL)
		return &u, nil
	}
	u, err := url.Parse(base + path)
	if err != nil {
		return nil, err
	}
	if c.n.Load() < maxCachedURLs {
		if _, loaded := c.m.LoadOrStore(key, u); !loaded {
			c.n.Add(1)
		}
	}
	cp := *u
	return &cp, nil
}

// Answered is the Result of an upstream answer as its headers tell it: the
// status and the provider's rate-limit headers.
func Answered(resp *http.Response) Result {
	return Result{Status: resp.StatusCode, Limits: ParseLimits(resp.Header, time.Time{})}
}

// maxPassHead bounds how much of a passed-through body is kept to read a
// usage block from.
const maxPassHead = 1 << 20

// Pass writes an answer's status and body to w as the body arrives,
// flushing each read, unbuffered and unbounded. It returns the body's
// first MiB, where a JSON answer's usage block is. A client that leaves
// ends the copy.
func Pass(w http.ResponseWriter, resp *http.Response) []byte {
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	var head bytes.Buffer
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if head.Len() < maxPassHead {
				head.Write(buf[:n])
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return head.Bytes()
			}
			_ = rc.Flush()
		}
		if err != nil {
			return head.Bytes()
		}
	}
}

// CopyHeaders relays the response headers a client needs (content type and
// disposition, the upstream's request id) and nothing that would contradict
// the gateway's own (its x-ratelimit-* stay the gateway's).
func CopyHeaders(w http.ResponseWriter, resp *http.Response) {
	h := w.Header()
	// The answer's own value slices, shared (one of each), not copied.
	for _, k := range []string{"Content-Type", "Content-Disposition"} {
		if vs := resp.Header[k]; len(vs) > 0 && vs[0] != "" {
			h[k] = vs[:1:1]
		}
	}
	for _, k := range []string{"X-Request-Id", "Request-Id", "Apim-Request-Id"} {
		if vs := resp.Header[k]; len(vs) > 0 && vs[0] != "" {
			h["X-Upstream-Request-Id"] = vs[:1:1]
			break
		}
	}
}

// SetModel returns the JSON object body with its "model" member set to
// model, and any other members given in set. The rest of the body is kept
// byte for byte.
func SetModel(body []byte, model string, set map[string]any) ([]byte, error) {
	if len(set) == 0 {
		return WithModel(body, model, false)
	}
	kvs := make([]jsonx.KV, 0, len(set))
	for _, k := range slices.Sorted(maps.Keys(set)) {
		raw, ok := set[k].(json.RawMessage) // already JSON: as it is
		if !ok {
			var err error
			if raw, err = json.Marshal(set[k]); err != nil {
				return nil, err
			}
		}
		kvs = append(kvs, jsonx.KV{Key: k, Value: raw})
	}
	return WithModel(body, model, false, kvs...)
}

// WithModel is SetModel with the other members given as raw JSON, in the
// order they are added where the body lacks them. once says the body
// gives each member once (Request.Once): its model is then looked for
// only as far as the first, where clients put it.
func WithModel(body []byte, model string, once bool, set ...jsonx.KV) ([]byte, error) {
	if model != "" {
		member := jsonx.Member
		if once {
			member = jsonx.FirstMember
		}
		if v, ok := member(body, "model"); !ok || !isQuoted(v, model) {
			return withMembers(body, jsonx.KV{Key: "model", Value: quote(model)}, set)
		}
	}
	if len(set) == 0 {
		return body, nil // nothing to change
	}
	return jsonx.Set(body, set...)
}

// withMembers is body with first and then set's members set, in one pass
// for a few. Nothing of set is kept, so that an Edit in it (and what it
// holds) can stay on its caller's stack.
func withMembers(body []byte, first jsonx.KV, set []jsonx.KV) ([]byte, error) {
	var all [4]jsonx.KV
	if len(set) < len(all) {
		all[0] = first
		for i := range set { // not copy: escape analysis takes what copy copies as kept
			all[i+1] = set[i]
		}
		return jsonx.Set(body, all[:len(set)+1]...)
	}
	body, err := jsonx.Set(body, first)
	if err != nil {
		return nil, err
	}
	return jsonx.Set(body, set...)
}

// isQuoted reports whether v is s as a JSON string written plainly: s
// between quotes, nothing in s that either quoting would escape (what
// strconv.Quote(s) is when plainASCII(s), without making it).
func isQuoted(v []byte, s string) bool {
	return len(v) == len(s)+2 && v[0] == '"' && v[len(v)-1] == '"' && string(v[1:len(v)-1]) == s && plainASCII(s)
}

// quote is s as a JSON string.
func quote(s string) []byte {
	if plainASCII(s) {
		return strconv.AppendQuote(nil, s)
	}
	b, _ := json.Marshal(s)
	return b
}

// plainASCII reports whether s quotes the same in Go and in JSON.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// ReadAll reads a whole non-streaming answer, at most max bytes.
func ReadAll(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err == nil && int64(len(b)) > max {
		return nil, errors.New("upstream answer larger than the gateway accepts")
	}
	return b, err
}

// ReadAnswer reads resp's whole body as ReadAll does, into one buffer of
// the size the answer declares when it declares one (up to a megabyte:
// a larger one grows as it arrives, as ReadAll's does).
func ReadAnswer(resp *http.Response, max int64) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > min(max, 1<<20) {
		return ReadAll(resp.Body, max)
	}
	b := make([]byte, n+1) // one byte more, to see the body end where it said
	got, err := io.ReadFull(resp.Body, b)
	switch {
	case int64(got) == n && (err == io.ErrUnexpectedEOF || err == io.EOF):
		return b[:n], nil
	case err != nil:
		return nil, err // shorter than declared
	}
	rest, err := ReadAll(resp.Body, max-int64(got)) // longer than declared
	if err != nil {
		return nil, err
	}
	return append(b, rest...), nil
}

// MaxAnswerBytes bounds a non-streaming answer the gateway reads whole.
const MaxAnswerBytes = 64 << 20
