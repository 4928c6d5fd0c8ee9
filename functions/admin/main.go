// Command admin is tollgate's admin function: rate-limit rules with live
// usage, counter resets and managed API keys, behind the same API Gateway
// as the gateway (routes /admin/*). Outside Lambda it serves the same API
// on 127.0.0.1:$PORT; a local gateway process also mounts it.
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
	if err := a.BuildAdmin(); err != nil {
		app.Exit(log, err)
	}
	if a.Config.Settings.InLambda {
		lambda.StartWithOptions(lambdaweb.Handler(a.Admin, false, log), lambda.WithContext(ctx))
		return
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Config.Settings.Port))
	srv := &http.Server{Addr: addr, Handler: a.Admin, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("admin API listening", "addr", "http://"+addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		app.Exit(log, err)
	}
}
