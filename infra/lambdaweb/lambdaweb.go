// Package lambdaweb serves an http.Handler from Lambda, behind API
// Gateway or a Lambda function URL.
//
// REST API events (v1) and function URL events can be answered as a
// stream: API Gateway's response streaming integration (GA since November
// 2025) and a function URL whose invoke mode is RESPONSE_STREAM read the
// function's response as it is written, so server-sent events reach the
// client chunk by chunk. aws-lambda-go-api-proxy buffers whole responses
// (its Flush does nothing), so the streaming adapters are this package's
// own; api-proxy serves buffered REST and HTTP API v2 events.
package lambdaweb

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"
)

// Handler returns a Lambda handler for h that accepts API Gateway REST API
// (v1) and HTTP API (v2) events, and Lambda function URL events. With
// stream, REST events are answered as a response stream (the integration
// must use the response-streaming-invocations URI and transfer mode
// STREAM) and function URL events too (the URL's invoke mode must be
// RESPONSE_STREAM); without, both are buffered (a function URL's invoke
// mode BUFFERED). HTTP API events are always buffered.
func Handler(h http.Handler, stream bool, log *slog.Logger) func(context.Context, json.RawMessage) (any, error) {
	v1 := httpadapter.New(h)
	v2 := httpadapter.NewV2(h)
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var probe struct {
			Version        string `json:"version"`
			RawPath        string `json:"rawPath"`
			RequestContext struct {
				DomainName string `json:"domainName"`
			} `json:"requestContext"`
		}
		_ = json.Unmarshal(raw, &probe)
		if probe.Version == "2.0" || probe.RawPath != "" {
			if isFunctionURL(probe.RequestContext.DomainName) {
				var ev events.LambdaFunctionURLRequest
				if err := json.Unmarshal(raw, &ev); err != nil {
					return nil, fmt.Errorf("function URL event: %w", err)
				}
				if stream {
					return StreamFunctionURL(ctx, h, ev, log)
				}
				return ServeFunctionURL(ctx, h, ev)
			}
			var ev events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(raw, &ev); err != nil {
				return nil, fmt.Errorf("HTTP API event: %w", err)
			}
			return v2.ProxyWithContext(ctx, ev)
		}
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("REST API event: %w", err)
		}
		if !stream {
			return v1.ProxyWithContext(ctx, ev)
		}
		return Stream(ctx, h, ev, log)
	}
}

// isFunctionURL reports whether an event's domain is a function URL's:
// <url-id>.lambda-url.<region>.on.aws. A function URL's event has the
// HTTP API v2 payload's shape; this is what tells them apart.
func isFunctionURL(domain string) bool { return strings.Contains(domain, ".lambda-url.") }

// Stream serves a REST API event with h and returns as soon as h has
// decided its status and headers; the body follows through the returned
// response's reader as h writes it, each write passed on at once.
func Stream(ctx context.Context, h http.Handler, ev events.APIGatewayProxyRequest, log *slog.Logger) (*events.APIGatewayProxyStreamingResponse, error) {
	req, err := Request(ctx, ev)
	if err != nil {
		return nil, err
	}
	w, body, err := serveStream(ctx, h, req, log)
	if err != nil {
		return nil, err
	}
	return &events.APIGatewayProxyStreamingResponse{
		StatusCode:        w.status,
		MultiValueHeaders: w.sent,
		Body:              body,
	}, nil
}

// serveStream runs h on req and returns once h has decided its status
// and headers, with the reader its body follows through.
func serveStream(ctx context.Context, h http.Handler, req *http.Request, log *slog.Logger) (*streamWriter, io.Reader, error) {
	pr, pw := io.Pipe()
	w := &streamWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				if log != nil {
					log.Error("handler panicked", "panic", fmt.Sprint(p))
				}
				w.WriteHeader(http.StatusInternalServerError)
				_ = pw.CloseWithError(fmt.Errorf("handler panicked: %v", p))
				return
			}
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing
			_ = pw.Close()
		}()
		h.ServeHTTP(w, req)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		_ = pr.CloseWithError(ctx.Err())
		return nil, nil, ctx.Err()
	}
	return w, pr, nil
}

// streamWriter is the http.ResponseWriter of a streamed answer. The pipe
// behind it is unbuffered: a Write returns once the runtime has taken the
// bytes, so there is nothing to flush.
type streamWriter struct {
	header http.Header
	body   *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
	sent   map[string][]string
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(status int) {
	w.once.Do(func() {
		w.status = status
		w.sent = map[string][]string(w.header.Clone())
		close(w.ready)
	})
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush implements http.Flusher; see the type's comment.
func (w *streamWriter) Flush() { w.WriteHeader(http.StatusOK) }

// Request builds the http.Request of a REST API event.
func Request(ctx context.Context, ev events.APIGatewayProxyRequest) (*http.Request, error) {
	q := url.Values{}
	for k, vs := range ev.MultiValueQueryStringParameters {
		q[k] = append([]string(nil), vs...)
	}
	for k, v := range ev.QueryStringParameters {
		if _, ok := q[k]; !ok {
			q.Set(k, v)
		}
	}
	body, err := eventBody(ev.Body, ev.IsBase64Encoded)
	if err != nil {
		return nil, err
	}
	path := ev.Path
	if path == "" {
		path = "/"
	}
	u := &url.URL{Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, ev.HTTPMethod, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range ev.MultiValueHeaders {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	for k, v := range ev.Headers {
		if req.Header.Get(k) == "" {
			req.Header.Set(k, v)
		}
	}
	req.Host = req.Header.Get("Host")
	settle(req, u, len(body), ev.RequestContext.Identity.SourceIP, ev.RequestContext.RequestID)
	return req, nil
}

// eventBody is an event's body, decoded when the event says it is base64.
func eventBody(body string, encoded bool) ([]byte, error) {
	if !encoded {
		return []byte(body), nil
	}
	b, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return nil, errors.New("event body is not valid base64")
	}
	return b, nil
}

// settle sets what an event's request carries beside its method, URL,
// headers and body: the request URI, the client's address, the body's
// length, and the invocation's request id unless the client sent one.
func settle(req *http.Request, u *url.URL, bodyLen int, sourceIP, requestID string) {
	req.RequestURI = u.RequestURI()
	req.RemoteAddr = sourceIP
	req.ContentLength = int64(bodyLen)
	if requestID != "" && req.Header.Get("X-Amzn-Request-Id") == "" {
		req.Header.Set("X-Amzn-Request-Id", requestID)
	}
}
