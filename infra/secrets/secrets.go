// Package secrets reads provider keys from AWS Systems Manager Parameter
// Store and Secrets Manager, once at start, so that no key is written in
// the template or in environment variables.
package secrets

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/tollgate/tollgate/infra/awserr"
)

// Resolver reads parameters and secrets.
type Resolver struct {
	ssm *ssm.Client
	sm  *secretsmanager.Client
}

// Options tune a Resolver; the endpoints are for tests and local engines
// (the SDK's AWS_ENDPOINT_URL_SSM and AWS_ENDPOINT_URL_SECRETS_MANAGER work
// too).
type Options struct {
	SSMEndpoint            string
	SecretsManagerEndpoint string
}

// New returns a Resolver on cfg.
func New(cfg aws.Config, o Options) *Resolver {
	return &Resolver{
		ssm: ssm.NewFromConfig(cfg, func(so *ssm.Options) {
			if o.SSMEndpoint != "" {
				so.BaseEndpoint = aws.String(o.SSMEndpoint)
			}
		}),
		sm: secretsmanager.NewFromConfig(cfg, func(so *secretsmanager.Options) {
			if o.SecretsManagerEndpoint != "" {
				so.BaseEndpoint = aws.String(o.SecretsManagerEndpoint)
			}
		}),
	}
}

// Parameter reads an SSM parameter, decrypting a SecureString.
func (r *Resolver) Parameter(ctx context.Context, name string) (string, error) {
	out, err := r.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
	if err != nil {
		return "", fmt.Errorf("SSM parameter %s: %s", name, describe(err))
	}
	if out.Parameter == nil || aws.ToString(out.Parameter.Value) == "" {
		return "", fmt.Errorf("SSM parameter %s is empty", name)
	}
	return aws.ToString(out.Parameter.Value), nil
}

// Secret reads a Secrets Manager secret: its string, or, when that is a
// JSON object, its "api_key" (or only) field.
func (r *Resolver) Secret(ctx context.Context, id string) (string, error) {
	out, err := r.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("secret %s: %s", id, describe(err))
	}
	v := strings.TrimSpace(aws.ToString(out.SecretString))
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

// describe names an AWS error by its code, never echoing values.
func describe(err error) string {
	if c := awserr.Code(err); c != "" {
		return c
	}
	return err.Error()
}
