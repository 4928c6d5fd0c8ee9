package lambdaweb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

func urlEvent(method, rawPath, query, body string, b64 bool) events.LambdaFunctionURLRequest {
	ev := events.LambdaFunctionURLRequest{
		Version: "2.0", RawPath: rawPath, RawQueryString: query,
		Headers: map[string]string{"authorization": "Bearer k", "accept": "text/plain, application/json", "host": "abc.lambda-url.us-east-1.on.aws"},
		Cookies: []string{"a=1", "b=2"},
		Body:    body, IsBase64Encoded: b64,
	}
	ev.RequestContext.DomainName = "abc.lambda-url.us-east-1.on.aws"
	ev.RequestContext.RequestID = "req-1"
	ev.RequestContext.HTTP.Method = method
	ev.RequestContext.HTTP.SourceIP = "203.0.113.7"
	return ev
}

// A function URL event becomes the request the client sent: its raw path
// decoded once, its query as sent, headers with repeated values joined,
// cookies as one Cookie header, a base64 body decoded.
func TestFunctionURLRequest(t *testing.T) {
	ev := urlEvent("POST", "/v1/files/a%2Fb", "x=1&x=2", base64.StdEncoding.EncodeToString([]byte{0, 1, 2}), true)
	req, err := FunctionURLRequest(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	switch {
	case req.Method != "POST", req.URL.Path != "/v1/files/a/b", req.URL.EscapedPath() != "/v1/files/a%2Fb":
		t.Errorf("method %s path %q (escaped %q)", req.Method, req.URL.Path, req.URL.EscapedPath())
	case strings.Join(req.URL.Query()["x"], ",") != "1,2":
		t.Errorf("query %v", req.URL.Query())
	case req.Header.Get("Authorization") != "Bearer k" || req.Header.Get("Cookie") != "a=1; b=2":
		t.Errorf("headers %v", req.Header)
	case string(body) != "\x00\x01\x02" || req.ContentLength != 3:
		t.Errorf("body %q (%d)", body, req.ContentLength)
	case req.Host != "abc.lambda-url.us-east-1.on.aws" || req.RemoteAddr != "203.0.113.7" || req.Header.Get("X-Amzn-Request-Id") != "req-1":
		t.Errorf("host %q remote %q request id %q", req.Host, req.RemoteAddr, req.Header.Get("X-Amzn-Request-Id"))
	}
	if _, err := FunctionURLRequest(context.Background(), urlEvent("POST", "/", "", "%%%", true)); err == nil {
		t.Error("a body that is not base64 was accepted")
	}
}

var answer = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	w.Header().Add("Vary", "Authorization")
	w.Header().Add("Set-Cookie", "s=1")
	w.Header().Add("Set-Cookie", "t=2; Path=/")
	w.WriteHeader(http.StatusCreated)
	w.Header().Set("X-Late", "after the status: not sent")
	_, _ = w.Write([]byte("hello " + r.URL.Path))
})

// The Handler tells a function URL event from an HTTP API one by its
// domain, and answers it streamed or buffered as its URL's invoke mode
// says: one value per header, the cookies apart.
func TestHandlerServesFunctionURLs(t *testing.T) {
	raw, err := json.Marshal(urlEvent("GET", "/v1/models", "", "", false))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	out, err := Handler(answer, true, nil)(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	sr, ok := out.(*events.LambdaFunctionURLStreamingResponse)
	if !ok {
		t.Fatalf("streamed: %T, want a function URL streaming response", out)
	}
	body, _ := io.ReadAll(sr.Body)
	if sr.StatusCode != 201 || sr.Headers["Vary"] != "Accept, Authorization" || strings.Join(sr.Cookies, "|") != "s=1|t=2; Path=/" ||
		sr.Headers["X-Late"] != "" || string(body) != "hello /v1/models" {
		t.Fatalf("streamed answer %d %v %v %q", sr.StatusCode, sr.Headers, sr.Cookies, body)
	}

	out, err = Handler(answer, false, nil)(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	br, ok := out.(events.LambdaFunctionURLResponse)
	if !ok {
		t.Fatalf("buffered: %T, want a function URL response", out)
	}
	decoded, _ := base64.StdEncoding.DecodeString(br.Body)
	if br.StatusCode != 201 || !br.IsBase64Encoded || br.Headers["Vary"] != "Accept, Authorization" || len(br.Cookies) != 2 ||
		br.Headers["X-Late"] != "" || string(decoded) != "hello /v1/models" {
		t.Fatalf("buffered answer %+v", br)
	}

	// An HTTP API event, the same shape on another domain, stays buffered
	// through api-proxy.
	var v2 events.APIGatewayV2HTTPRequest
	_ = json.Unmarshal(raw, &v2)
	v2.RequestContext.DomainName = "a1b2c3.execute-api.us-east-1.amazonaws.com"
	v2.RequestContext.HTTP.Method = "GET"
	raw, _ = json.Marshal(v2)
	out, err = Handler(answer, true, nil)(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.(events.APIGatewayV2HTTPResponse); !ok {
		t.Fatalf("HTTP API event answered with %T", out)
	}
}
