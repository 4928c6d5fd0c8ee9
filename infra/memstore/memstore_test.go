package memstore_test

import (
	"testing"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/storetest"
)

func TestBehaviour(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		s := memstore.New()
		return func() limiter.Store { return s }
	})
}
