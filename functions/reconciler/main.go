// Command reconciler is tollgate's reconciler function: started by an
// EventBridge schedule (or by a DynamoDB stream event source mapping), it
// settles token reservations with actual usage from the lease table's
// stream and releases the slots of requests whose process died. Outside
// Lambda it runs the same work on a ticker (TOLLGATE_RECONCILE_INTERVAL).
package main

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/tollgate/tollgate/functions/app"
)

func main() {
	app.Main(func(ctx context.Context, a *app.App) error {
		if a.Config.Settings.InLambda {
			lambda.StartWithOptions(handler(a), lambda.WithContext(ctx))
			return nil
		}
		if a.Config.Settings.Store == "memory" {
			return errors.New("the embedded store lives inside the gateway process, which runs its own reconciler; " +
				"run this command with TOLLGATE_STORE=dynamodb")
		}
		a.RunReconcilerLoop(ctx)
		return nil
	})
}
