package dynamostore_test

import (
	"testing"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/infra/metrics/statstest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/storetest"
)

func openStore(t testing.TB, prefix string, o dynamostore.Options) *dynamostore.Store {
	t.Helper()
	if o.API == nil {
		o.API = dynamotest.Client(t, dynamostore.ClientOptions{})
	}
	o.TablePrefix = prefix
	s, err := dynamostore.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBehaviour runs the suite the embedded store passes, unchanged. Every
// store it opens has its own SDK client, as separate Lambda environments
// would.
func TestBehaviour(t *testing.T) {
	dynamotest.Endpoint(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		prefix := dynamotest.Prefix(t)
		return func() limiter.Store { return openStore(t, prefix, dynamostore.Options{}) }
	})
}

func TestStats(t *testing.T) {
	dynamotest.Endpoint(t)
	statstest.Run(t, openStore(t, dynamotest.Prefix(t), dynamostore.Options{}))
}
