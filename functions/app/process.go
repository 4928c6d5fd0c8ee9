package app

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

	"github.com/tollgate/tollgate/functions/config"
)

// Main is the body of every function's main: it reads the environment,
// builds the App, and calls run with a context that SIGINT or SIGTERM
// cancels. A failure to start, or an error from run, is logged and exits
// the process with status 1.
func Main(run func(ctx context.Context, a *App) error) {
	env := config.Environ()
	log := Logger(os.Stderr, env)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := New(ctx, env, log)
	if err != nil {
		Exit(log, err)
	}
	defer a.Close()
	if err := run(ctx, a); err != nil {
		Exit(log, err)
	}
}

// The local server's timeouts.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second // the whole request, body included
	IdleTimeout       = 60 * time.Second
)

// LocalServer is the HTTP server of a local process. A client that
// trickles its request, or holds an idle connection, is cut off; answers
// have a deadline per write instead (gateway.stream_write_timeout), so
// long streams can run.
func LocalServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
	}
}

// ServeLocal serves h on 127.0.0.1 at the configured port until ctx is
// cancelled, then shuts down gracefully (10 s at most).
func (a *App) ServeLocal(ctx context.Context, h http.Handler) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Config.Settings.Port))
	srv := LocalServer(addr, h)
	// Bound before it says so: "listening" means a request now connects.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.Log.Info("listening", "addr", "http://"+ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.Log.Error("shutdown", "err", err)
	}
	if a.Gateway != nil {
		a.Gateway.WaitCompletions(shutdown) // completions still being retried
	}
	a.Log.Info("stopped")
	return nil
}
