// Command gateway is tollgate's gateway function. Inside Lambda it serves
// API Gateway events, streaming; anywhere else it is the whole local stack
// in one process: the gateway on 127.0.0.1:$PORT, with the reconciler on a
// ticker.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/infra/lambdaweb"
)

func main() {
	app.Main(func(ctx context.Context, a *app.App) error {
		if err := a.BuildGateway(); err != nil {
			return err
		}
		if a.Config.Settings.InLambda {
			// API Gateway REST API with response streaming: answers flow to
			// the client as they are written.
			lambda.StartWithOptions(lambdaweb.Handler(a.Gateway, true, a.Log), lambda.WithContext(ctx))
			return nil
		}
		// A local process is the whole stack: the admin API is mounted and
		// the reconciler runs in it too.
		if err := a.BuildAdmin(); err != nil {
			return err
		}
		go a.RunReconcilerLoop(ctx)
		return a.ServeLocal(ctx, a.LocalHandler())
	})
}
