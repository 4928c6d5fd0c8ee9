package bedrock

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/providers"
)

// statusOf maps Bedrock's error codes to the status the gateway acts on:
// throttling and quota errors are the upstream's 429 (a cooldown shared by
// the fleet, and failover); a model not ready, an unavailable service and
// internal errors fail over (5xx); a validation error is the client's 400;
// access denied, 403. Codes not listed keep Bedrock's status.
var statusOf = map[string]int{
	"ThrottlingException":           http.StatusTooManyRequests,
	"ServiceQuotaExceededException": http.StatusTooManyRequests,
	"ModelNotReadyException":        http.StatusServiceUnavailable,
	"ServiceUnavailableException":   http.StatusServiceUnavailable,
	"InternalServerException":       http.StatusInternalServerError,
	"ModelStreamErrorException":     http.StatusBadGateway,
	"ModelErrorException":           http.StatusBadGateway,
	"ModelTimeoutException":         http.StatusGatewayTimeout,
	"ValidationException":           http.StatusBadRequest,
	"AccessDeniedException":         http.StatusForbidden,
	"UnrecognizedClientException":   http.StatusForbidden,
	"ResourceNotFoundException":     http.StatusNotFound,
}

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 16 << 10

// upstreamError reads an error answer: its code from the X-Amzn-ErrorType
// header ("ThrottlingException:http://internal.amazon.com/…") or the
// body's __type or code, and its message.
func (p *Provider) upstreamError(resp *http.Response) *providers.Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var b struct {
		Type    string `json:"__type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Upper   string `json:"Message"`
	}
	_ = json.Unmarshal(body, &b)
	code := resp.Header.Get("X-Amzn-Errortype")
	if code == "" {
		code = b.Type
	}
	if code == "" {
		code = b.Code
	}
	msg := b.Message
	if msg == "" {
		msg = b.Upper
	}
	e := p.errorOf(errorCode(code), msg, resp.StatusCode)
	e.Header = resp.Header.Clone()
	return e
}

// errorOf is the *providers.Error of a Bedrock error, whether it came as
// an answer's status or as an exception event of a stream.
func (p *Provider) errorOf(code, msg string, status int) *providers.Error {
	if s, ok := statusOf[code]; ok {
		status = s
	}
	if status < 400 {
		status = http.StatusBadGateway
	}
	if code == "" {
		code = http.StatusText(status)
	}
	text := code
	if msg != "" {
		text += ": " + msg
	}
	body, _ := json.Marshal(map[string]string{"message": text})
	return &providers.Error{Provider: p.cfg.Name, Status: status, Body: body, Err: errors.New(text)}
}

// errorCode trims a code to its name: "aws.protocols#ThrottlingException"
// and "ThrottlingException:http://…" are ThrottlingException; a stream's
// exception types are lower camel case ("throttlingException").
func errorCode(s string) string {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		s = s[i+1:]
	}
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = strings.ToUpper(s[:1]) + s[1:]
	}
	return s
}
