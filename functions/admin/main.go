// Command admin is tollgate's admin function: rate-limit rules with live
// usage, counter resets and managed API keys, behind the same API Gateway
// as the gateway (routes /admin/*). Outside Lambda it serves the same API
// on 127.0.0.1:$PORT; a local gateway process also mounts it.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/infra/lambdaweb"
)

func main() {
	app.Main(func(ctx context.Context, a *app.App) error {
		if err := a.BuildAdmin(); err != nil {
			return err
		}
		if a.Config.Settings.InLambda {
			lambda.StartWithOptions(lambdaweb.Handler(a.Admin, false, a.Log), lambda.WithContext(ctx))
			return nil
		}
		return a.ServeLocal(ctx, a.Admin)
	})
}
