// Command gateway is tollgate's gateway function. Inside Lambda it serves
// API Gateway events, streaming; anywhere else it is the whole local stack
// in one process: the gateway on 127.0.0.1:$PORT, with the reconciler on a
// ticker.
package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
	"github.com/tollgate/tollgate/infra/lambdaweb"
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
	if err := a.BuildGateway(); err != nil {
		app.Exit(log, err)
	}
	if a.Config.Settings.InLambda {
		// API Gateway REST API with response streaming: answers flow to the
		// client as they are written.
		lambda.StartWithOptions(lambdaweb.Handler(a.Gateway, true, log), lambda.WithContext(ctx))
		return
	}

	// A local process is the whole stack: the admin API is mounted and the
	// reconciler runs in it too.
	if err := a.BuildAdmin(); err != nil {
		app.Exit(log, err)
	}
	go a.RunReconcilerLoop(ctx)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Config.Settings.Port))
	srv := &http.Server{Addr: addr, Handler: a.LocalHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", "addr", "http://"+addr)
	select {
	case err := <-errc:
		app.Exit(log, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("shutdown", "err", err)
	}
	log.Info("stopped")
}
