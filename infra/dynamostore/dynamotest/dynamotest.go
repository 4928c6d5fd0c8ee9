// Package dynamotest gives tests a DynamoDB-compatible engine: the one
// `make test` starts (DynamoDB Local, named by AWS_ENDPOINT_URL_DYNAMODB),
// with a fresh set of tables per test.
package dynamotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tollgate/tollgate/infra/dynamostore"
)

// Require, when set in the environment, turns a missing engine from a
// skip into a failure; `make test` sets it.
const Require = "TOLLGATE_REQUIRE_DYNAMODB"

// Endpoint returns the engine's endpoint, skipping the test when there is
// none (failing when Require is set).
func Endpoint(t testing.TB) string {
	t.Helper()
	ep := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if ep == "" {
		if os.Getenv(Require) != "" {
			t.Fatal("AWS_ENDPOINT_URL_DYNAMODB is not set but " + Require + " is: the engine did not start")
		}
		t.Skip("no DynamoDB engine: run `make test`, or set AWS_ENDPOINT_URL_DYNAMODB")
	}
	return ep
}

// Client returns a new client on the engine (each call is a separate
// client, as a separate Lambda environment would have).
func Client(t testing.TB, o dynamostore.ClientOptions) *dynamodb.Client {
	t.Helper()
	Endpoint(t)
	c, err := dynamostore.NewClient(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Prefix creates a fresh set of tollgate's tables under a unique prefix
// and deletes them when the test ends.
func Prefix(t testing.TB) string {
	t.Helper()
	c := Client(t, dynamostore.ClientOptions{})
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "t" + hex.EncodeToString(b[:]) + "-"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamostore.CreateTables(ctx, c, prefix); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, spec := range dynamostore.Specs {
			_, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(prefix + spec.Suffix)})
		}
	})
	return prefix
}

// StreamsConfig returns the AWS configuration of the engine, for clients of
// other services on it (DynamoDB Streams).
func StreamsConfig(t testing.TB) dynamostore.ClientOptions {
	t.Helper()
	Endpoint(t)
	if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB_STREAMS") == "" {
		t.Fatal("AWS_ENDPOINT_URL_DYNAMODB_STREAMS is not set")
	}
	return dynamostore.ClientOptions{}
}

// Distant is an HTTP client for the SDK that adds a fixed round-trip time
// to every call: the engine as a Lambda sees DynamoDB across its region's
// network, for benchmarks.
func Distant(rtt time.Duration) aws.HTTPClient {
	return distant{base: awshttp.NewBuildableClient(), rtt: rtt}
}

type distant struct {
	base aws.HTTPClient
	rtt  time.Duration
}

func (d distant) Do(r *http.Request) (*http.Response, error) {
	time.Sleep(d.rtt)
	return d.base.Do(r)
}
