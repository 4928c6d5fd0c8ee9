// Command reconciler is tollgate's reconciler function: started by an
// EventBridge schedule (or by a DynamoDB stream event source mapping), it
// settles token reservations with actual usage from the lease table's
// stream and releases the slots of requests whose process died. Outside
// Lambda it runs the same work on a ticker (TOLLGATE_RECONCILE_INTERVAL).
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
)

func main() {
	env := config.Environ()
	log := app.Logger(os.Stderr, env)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := app.New(ctx, env, log)
	if err != nil {
		app.Exit(log, err)
	}
	defer a.Close()
	if a.Config.Settings.InLambda {
		lambda.StartWithOptions(handler(a), lambda.WithContext(ctx))
		return
	}
	if a.Config.Settings.Store == "memory" {
		app.Exit(log, errors.New("the embedded store lives inside the gateway process, which runs its own reconciler; "+
			"run this command with TOLLGATE_STORE=dynamodb"))
	}
	a.RunReconcilerLoop(ctx)
}
