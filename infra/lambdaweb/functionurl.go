package lambdaweb

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// A function URL event has the HTTP API v2 payload's shape, with one
// header per name (repeated headers joined by commas) and the cookies
// apart; its answer, streamed or buffered, the same: one value per header
// name, the cookies apart.

// StreamFunctionURL serves a function URL event with h, for a URL whose
// invoke mode is RESPONSE_STREAM, and returns as soon as h has decided its
// status and headers; the body follows as h writes it, each write passed
// on at once.
func StreamFunctionURL(ctx context.Context, h http.Handler, ev events.LambdaFunctionURLRequest, log *slog.Logger) (*events.LambdaFunctionURLStreamingResponse, error) {
	req, err := FunctionURLRequest(ctx, ev)
	if err != nil {
		return nil, err
	}
	w, body, err := serveStream(ctx, h, req, log)
	if err != nil {
		return nil, err
	}
	headers, cookies := singleValued(w.sent)
	return &events.LambdaFunctionURLStreamingResponse{
		StatusCode: w.status,
		Headers:    headers,
		Cookies:    cookies,
		Body:       body,
	}, nil
}

// ServeFunctionURL serves a function URL event with h, for a URL whose
// invoke mode is BUFFERED: the whole answer in one response.
func ServeFunctionURL(ctx context.Context, h http.Handler, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
	req, err := FunctionURLRequest(ctx, ev)
	if err != nil {
		return events.LambdaFunctionURLResponse{}, err
	}
	w := &bufferedWriter{header: http.Header{}}
	h.ServeHTTP(w, req)
	w.WriteHeader(http.StatusOK) // a handler that wrote nothing
	headers, cookies := singleValued(w.sent)
	return events.LambdaFunctionURLResponse{
		StatusCode:      w.status,
		Headers:         headers,
		Cookies:         cookies,
		Body:            base64.StdEncoding.EncodeToString(w.body.Bytes()),
		IsBase64Encoded: true,
	}, nil
}

// FunctionURLRequest builds the http.Request of a function URL event.
func FunctionURLRequest(ctx context.Context, ev events.LambdaFunctionURLRequest) (*http.Request, error) {
	body, err := eventBody(ev.Body, ev.IsBase64Encoded)
	if err != nil {
		return nil, err
	}
	raw := ev.RawPath
	if raw == "" {
		raw = "/"
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return nil, errors.New("event path is not a path: " + raw)
	}
	u.RawQuery = ev.RawQueryString
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	req.Host = req.Header.Get("Host")
	if req.Host == "" {
		req.Host = ev.RequestContext.DomainName
	}
	settle(req, u, len(body), ev.RequestContext.HTTP.SourceIP, ev.RequestContext.RequestID)
	return req, nil
}

// singleValued turns an answer's headers into a function URL's: repeated
// values joined by commas, as HTTP allows for list-valued fields, and
// Set-Cookie, which cannot be joined, as the cookies.
func singleValued(h map[string][]string) (map[string]string, []string) {
	out := make(map[string]string, len(h))
	var cookies []string
	for k, vs := range h {
		if http.CanonicalHeaderKey(k) == "Set-Cookie" {
			cookies = append(cookies, vs...)
			continue
		}
		out[k] = strings.Join(vs, ", ")
	}
	return out, cookies
}

// bufferedWriter is the http.ResponseWriter of a buffered answer. As
// net/http's, it sends the headers as they were when the status was
// written.
type bufferedWriter struct {
	header http.Header
	status int
	sent   http.Header
	body   bytes.Buffer
}

func (w *bufferedWriter) Header() http.Header { return w.header }

func (w *bufferedWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
		w.sent = w.header.Clone()
	}
}

func (w *bufferedWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}
