package tests

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/functions/app"
	"github.com/tollgate/tollgate/functions/config"
)

// An alert never delays a request: alerts are evaluated beside the
// reconciler and delivered from a bounded queue, so requests are answered
// as fast while every delivery hangs at a receiver that never answers as
// with no receiver at all. Each sub-benchmark runs the whole local stack
// (embedded store, mock provider) with twenty rules already past their
// alert threshold and the evaluation running every 5 ms beside the
// requests; it reports the requests' p50 and p99 (compare the two with
// benchstat: receiver=hangs against receiver=none).
func BenchmarkAdmissionWhileAlerting(b *testing.B) {
	for _, receiver := range []string{"none", "hangs"} {
		b.Run("receiver="+receiver, func(b *testing.B) {
			hooks := ""
			if receiver == "hangs" {
				release := make(chan struct{})
				hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}))
				b.Cleanup(func() { close(release); hang.Close() })
				hooks = fmt.Sprintf("  webhooks: [{url: %q, secret: s}]\n", hang.URL)
			}
			var rules strings.Builder
			for i := range 20 {
				fmt.Fprintf(&rules, "    - {path: /b/%d, limits: [{period: hour, max_requests: 10000000}]}\n", i)
			}
			cfg := "rate_limits:\n  user_paths:\n" + rules.String() +
				"alerts:\n  every: 1s\n  rules: [{on: any, at: [0.000001]}]\n" + hooks
			a, err := app.New(context.Background(), config.Env{"TOLLGATE_STORE": "memory", "TOLLGATE_MASTER_KEY": master,
				"TOLLGATE_CONFIG": writeConfig(b, cfg)}, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			if err := a.BuildGateway(); err != nil {
				b.Fatal(err)
			}
			h := a.Gateway
			chat := func(path string) time.Duration {
				r := httptest.NewRequest("POST", "/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
				r.Header.Set("Authorization", "Bearer "+master)
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("X-Tollgate-User-Path", path)
				w := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(w, r)
				d := time.Since(start)
				if w.Code != 200 {
					b.Fatalf("chat: %d %s", w.Code, w.Body)
				}
				_, _ = io.Copy(io.Discard, w.Body)
				return d
			}
			for i := range 500 {
				chat(fmt.Sprintf("/b/%d", i%20)) // every rule past its threshold, and the process warm
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			if fired, _ := a.EvaluateAlerts(ctx, true); len(fired) != 20 {
				b.Fatalf("%d alerts fired, want 20", len(fired))
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				t := time.NewTicker(5 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
						a.EvaluateAlerts(ctx, true)
					}
				}
			}()
			var took []time.Duration
			i := 0
			for b.Loop() {
				took = append(took, chat(fmt.Sprintf("/b/%d", i%20)))
				i++
			}
			stop()
			<-done
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
