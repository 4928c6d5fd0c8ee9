package dynamostore

import (
	"context"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tollgate/tollgate/infra/awserr"
)

// ClientOptions tune the AWS configuration tollgate's clients share.
type ClientOptions struct {
	// HTTPClient replaces the SDK's transport (tests inject faults here).
	HTTPClient aws.HTTPClient
	// MaxAttempts bounds each call's attempts, retries of throttling and
	// conflicts included, with jittered exponential backoff up to
	// MaxBackoff. Zero means 4 attempts and 200 ms.
	MaxAttempts int
	MaxBackoff  time.Duration
	// Endpoint, when set, overrides the endpoint the environment names
	// (AWS_ENDPOINT_URL_DYNAMODB).
	Endpoint string
}

// LoadAWSConfig loads the SDK's configuration from the environment, as the
// SDK itself does (AWS_REGION, credentials, AWS_ENDPOINT_URL_DYNAMODB,
// AWS_ENDPOINT_URL_DYNAMODB_STREAMS), with tollgate's retry policy. A
// local endpoint without credentials gets dummy ones, which local engines
// accept; a missing region defaults to us-east-1.
func LoadAWSConfig(ctx context.Context, o ClientOptions) (aws.Config, error) {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 200 * time.Millisecond
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = o.MaxAttempts
				so.MaxBackoff = o.MaxBackoff
				// A plain write to an item inside a pending transaction is
				// refused with TransactionConflict; nothing was written, so
				// it is safe to retry.
				so.Retryables = append(slices.Clone(so.Retryables), retry.RetryableErrorCode{
					Codes: map[string]struct{}{awserr.CodeTransactionConflict: {}},
				})
			})
		}),
	}
	// The SDK adds AWS_CA_BUNDLE to this client, which must therefore be
	// its own buildable kind; an injected HTTPClient is set on each
	// service client instead (see NewClient).
	opts = append(opts, config.WithHTTPClient(awshttp.NewBuildableClient().WithTimeout(10*time.Second).
		WithTransportOptions(func(t *http.Transport) { t.MaxIdleConnsPerHost = 64 })))
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	if localEndpoint() && os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	return config.LoadDefaultConfig(ctx, opts...)
}

func localEndpoint() bool {
	return os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
}

// NewClient returns a DynamoDB client configured as LoadAWSConfig says.
func NewClient(ctx context.Context, o ClientOptions) (*dynamodb.Client, error) {
	cfg, err := LoadAWSConfig(ctx, o)
	if err != nil {
		return nil, err
	}
	return dynamodb.NewFromConfig(cfg, func(do *dynamodb.Options) {
		if o.HTTPClient != nil {
			do.HTTPClient = o.HTTPClient
		}
		// DynamoDB Local sends a CRC32 of 0 on its error answers, which
		// the SDK reports on every refused charge; AWS's are right.
		do.DisableValidateResponseChecksum = localEndpoint() || o.Endpoint != ""
		if o.Endpoint != "" {
			do.BaseEndpoint = aws.String(o.Endpoint)
		}
	}), nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
