package secrets_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/tollgate/tollgate/infra/secrets"
)

// fakeAWS answers SSM GetParameter and Secrets Manager GetSecretValue in
// their JSON protocols.
func fakeAWS(t *testing.T) *httptest.Server {
	var throttles int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=a/") || r.Header.Get("X-Amz-Date") == "" {
			w.WriteHeader(403)
			_, _ = io.WriteString(w, `{"__type":"MissingAuthenticationTokenException","message":"unsigned"}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var in map[string]any
		_ = json.Unmarshal(body, &in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		switch r.Header.Get("X-Amz-Target") {
		case "AmazonSSM.GetParameter":
			if in["Name"] != "/tollgate/openai" || in["WithDecryption"] != true {
				w.WriteHeader(400)
				_, _ = io.WriteString(w, `{"__type":"ParameterNotFound","message":"not found"}`)
				return
			}
			_, _ = io.WriteString(w, `{"Parameter":{"Name":"/tollgate/openai","Type":"SecureString","Value":"sk-from-ssm","Version":1}}`)
		case "secretsmanager.GetSecretValue":
			switch in["SecretId"] {
			case "plain":
				_, _ = io.WriteString(w, `{"Name":"plain","SecretString":"sk-plain"}`)
			case "throttled":
				throttles++
				if throttles < 3 {
					w.WriteHeader(400)
					_, _ = io.WriteString(w, `{"__type":"com.amazonaws.secretsmanager#ThrottlingException","message":"slow down"}`)
					return
				}
				_, _ = io.WriteString(w, `{"SecretString":"sk-after-throttling"}`)
			case "json":
				_, _ = io.WriteString(w, `{"Name":"json","SecretString":"{\"api_key\":\"sk-json\",\"org\":\"o\"}"}`)
			default:
				w.WriteHeader(400)
				_, _ = io.WriteString(w, `{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}`)
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestResolver(t *testing.T) {
	srv := fakeAWS(t)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}
	r := secrets.New(cfg, secrets.Options{SSMEndpoint: srv.URL, SecretsManagerEndpoint: srv.URL})
	ctx := context.Background()
	if v, err := r.Parameter(ctx, "/tollgate/openai"); err != nil || v != "sk-from-ssm" {
		t.Fatalf("parameter %q %v", v, err)
	}
	if v, err := r.Secret(ctx, "plain"); err != nil || v != "sk-plain" {
		t.Fatalf("plain secret %q %v", v, err)
	}
	if v, err := r.Secret(ctx, "json"); err != nil || v != "sk-json" {
		t.Fatalf("json secret %q %v", v, err)
	}
	if v, err := r.Secret(ctx, "throttled"); err != nil || v != "sk-after-throttling" {
		t.Fatalf("throttled secret %q %v", v, err)
	}
	_, err := r.Secret(ctx, "missing")
	if err == nil || !strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Fatalf("missing secret: %v", err)
	}
	if _, err := r.Parameter(ctx, "/nope"); err == nil || !strings.Contains(err.Error(), "ParameterNotFound") {
		t.Fatalf("missing parameter: %v", err)
	}
}

// The service endpoints come from the SDK's environment variables when no
// option names them, and an unsigned-looking answer is reported by code.
func TestResolverEndpointsFromEnvironment(t *testing.T) {
	srv := fakeAWS(t)
	t.Setenv("AWS_ENDPOINT_URL_SSM", srv.URL)
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", srv.URL)
	cfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "token")}
	r := secrets.New(cfg, secrets.Options{})
	if v, err := r.Parameter(context.Background(), "/tollgate/openai"); err != nil || v != "sk-from-ssm" {
		t.Fatalf("parameter %q %v", v, err)
	}
	bad := secrets.New(aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("x", "y", "")}, secrets.Options{})
	_, err := bad.Secret(context.Background(), "plain")
	if err == nil || !strings.Contains(err.Error(), "MissingAuthenticationTokenException") || strings.Contains(err.Error(), "unsigned") {
		t.Fatalf("rejected call: %v", err)
	}
}
