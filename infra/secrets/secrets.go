// Package secrets reads provider keys from AWS Systems Manager Parameter
// Store and Secrets Manager, once at start, so that no key is written in
// the template or in environment variables.
//
// It speaks the two calls it needs (GetParameter, GetSecretValue) in their
// JSON protocol, signed with the SDK's SigV4 signer, instead of linking the
// generated SSM and Secrets Manager clients: their package initialisation
// alone cost a cold start about 3.5 ms of CPU (GODEBUG=inittrace=1), which
// a 128 MB Lambda pays about fourteen times slower.
package secrets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go"
)

// Resolver reads parameters and secrets.
type Resolver struct {
	cfg    aws.Config
	client aws.HTTPClient
	signer *v4.Signer
	ssm    endpoint
	sm     endpoint
}

// endpoint is one service's URL and signing name.
type endpoint struct {
	url, service, target string
}

// Options tune a Resolver; the endpoints are for tests and local engines
// (AWS_ENDPOINT_URL_SSM, AWS_ENDPOINT_URL_SECRETS_MANAGER and
// AWS_ENDPOINT_URL work too, as they do for the SDK).
type Options struct {
	SSMEndpoint            string
	SecretsManagerEndpoint string
}

// attempts bounds the tries of one call; throttling, 5xx answers and
// transport errors are retried with a short backoff.
const attempts = 3

// New returns a Resolver on cfg.
func New(cfg aws.Config, o Options) *Resolver {
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &Resolver{
		cfg:    cfg,
		client: client,
		signer: v4.NewSigner(),
		ssm:    endpoint{url: endpointURL(cfg, o.SSMEndpoint, "SSM", "ssm"), service: "ssm", target: "AmazonSSM."},
		sm:     endpoint{url: endpointURL(cfg, o.SecretsManagerEndpoint, "SECRETS_MANAGER", "secretsmanager"), service: "secretsmanager", target: "secretsmanager."},
	}
}

// endpointURL picks, in the SDK's order, the explicit endpoint, the
// service's AWS_ENDPOINT_URL_<ID>, the global AWS_ENDPOINT_URL (which the
// config loader puts in BaseEndpoint), then the regional endpoint.
func endpointURL(cfg aws.Config, explicit, envID, host string) string {
	if explicit != "" {
		return explicit
	}
	if !strings.EqualFold(os.Getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"), "true") {
		if v := os.Getenv("AWS_ENDPOINT_URL_" + envID); v != "" {
			return v
		}
		if cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "" {
			return *cfg.BaseEndpoint
		}
	}
	suffix := "amazonaws.com"
	if strings.HasPrefix(cfg.Region, "cn-") {
		suffix = "amazonaws.com.cn"
	}
	return "https://" + host + "." + cfg.Region + "." + suffix
}

// Parameter reads an SSM parameter, decrypting a SecureString.
func (r *Resolver) Parameter(ctx context.Context, name string) (string, error) {
	var out struct {
		Parameter *struct{ Value string }
	}
	in := map[string]any{"Name": name, "WithDecryption": true}
	if err := r.call(ctx, r.ssm, "GetParameter", in, &out); err != nil {
		return "", fmt.Errorf("SSM parameter %s: %s", name, describe(err))
	}
	if out.Parameter == nil || out.Parameter.Value == "" {
		return "", fmt.Errorf("SSM parameter %s is empty", name)
	}
	return out.Parameter.Value, nil
}

// Secret reads a Secrets Manager secret: its string, or, when that is a
// JSON object, its "api_key" (or only) field.
func (r *Resolver) Secret(ctx context.Context, id string) (string, error) {
	var out struct{ SecretString string }
	if err := r.call(ctx, r.sm, "GetSecretValue", map[string]any{"SecretId": id}, &out); err != nil {
		return "", fmt.Errorf("secret %s: %s", id, describe(err))
	}
	v := strings.TrimSpace(out.SecretString)
	if strings.HasPrefix(v, "{") {
		var m map[string]string
		if json.Unmarshal([]byte(v), &m) == nil {
			if k, ok := m["api_key"]; ok {
				return k, nil
			}
			if len(m) == 1 {
				for _, k := range m {
					return k, nil
				}
			}
			return "", fmt.Errorf("secret %s is a JSON object without an api_key field", id)
		}
	}
	if v == "" {
		return "", fmt.Errorf("secret %s is empty", id)
	}
	return v, nil
}

// call makes one JSON-protocol call, retrying what is worth retrying.
func (r *Resolver) call(ctx context.Context, ep endpoint, op string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	var last error
	for try := range attempts {
		if try > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(last, ctx.Err())
			case <-time.After(time.Duration(50<<try) * time.Millisecond):
			}
		}
		var retry bool
		retry, last = r.once(ctx, ep, op, body, hash, out)
		if last == nil || !retry {
			return last
		}
	}
	return last
}

// once sends one signed request; retry says whether a failure may pass on
// a second try.
func (r *Resolver) once(ctx context.Context, ep endpoint, op string, body []byte, hash string, out any) (retry bool, err error) {
	if r.cfg.Credentials == nil {
		return false, errors.New("no AWS credentials")
	}
	creds, err := r.cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return false, fmt.Errorf("AWS credentials: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(ep.url, "/")+"/", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", ep.target+op)
	if err := r.signer.SignHTTP(ctx, creds, req, hash, ep.service, r.cfg.Region, time.Now()); err != nil {
		return false, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return true, err
	}
	if resp.StatusCode/100 != 2 {
		e := parseError(resp, data)
		return resp.StatusCode >= 500 || strings.Contains(e.code, "Throttl"), e
	}
	if err := json.Unmarshal(data, out); err != nil {
		return false, fmt.Errorf("%s: unreadable answer: %w", op, err)
	}
	return false, nil
}

// apiError is an AWS error answer; it is a smithy.APIError so that
// infra/awserr classifies it like the SDK's.
type apiError struct {
	code, message string
	status        int
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (HTTP %d): %s", e.code, e.status, e.message)
}
func (e *apiError) ErrorCode() string    { return e.code }
func (e *apiError) ErrorMessage() string { return e.message }
func (e *apiError) ErrorFault() smithy.ErrorFault {
	if e.status >= 500 {
		return smithy.FaultServer
	}
	return smithy.FaultClient
}

// parseError reads the JSON protocol's error: "__type" (possibly
// namespaced "ns#Code") or the X-Amzn-ErrorType header, and "message".
func parseError(resp *http.Response, data []byte) *apiError {
	var body struct {
		Type       string `json:"__type"`
		Message    string `json:"message"`
		MessageCap string `json:"Message"`
	}
	_ = json.Unmarshal(data, &body)
	code := body.Type
	if code == "" {
		code = resp.Header.Get("X-Amzn-ErrorType")
	}
	if i := strings.LastIndexByte(code, '#'); i >= 0 {
		code = code[i+1:]
	}
	if i := strings.IndexByte(code, ':'); i >= 0 {
		code = code[:i]
	}
	if code == "" {
		code = http.StatusText(resp.StatusCode)
	}
	msg := body.Message
	if msg == "" {
		msg = body.MessageCap
	}
	return &apiError{code: code, message: msg, status: resp.StatusCode}
}

// describe names an AWS error by its code, never echoing values.
func describe(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return err.Error()
}
