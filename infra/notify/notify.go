// Package notify delivers alerts: to webhooks (a JSON body signed with
// HMAC-SHA256 of a shared secret) and to an SNS topic, from a bounded
// queue, each delivery retried with backoff. Nothing here runs on a
// request's path: the queue is filled by the alert evaluation, which runs
// where the reconciler does, and a receiver that hangs holds one worker
// for at most an attempt's timeout.
package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Notification is one alert's firing or resolution, as delivered.
type Notification struct {
	// ID names it in logs and in the X-Tollgate-Alert header: the alert's
	// id and its status.
	ID string
	// Subject is a one-line summary (SNS's subject, at most 100 bytes).
	Subject string
	// Body is the JSON document a webhook receives.
	Body []byte
}

// Target is one place notifications go.
type Target interface {
	// Name names it in logs, never with a secret.
	Name() string
	// Deliver makes one attempt; retry says whether another may succeed.
	Deliver(ctx context.Context, n Notification) (retry bool, err error)
}

// SignatureHeader carries a webhook body's signature: "sha256=" and the
// hex HMAC-SHA256 of the body with the webhook's secret.
const SignatureHeader = "X-Tollgate-Signature"

// Sign returns the signature header's value for body.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether header is body's signature with secret, in
// constant time: what a receiver does.
func Verify(secret string, body []byte, header string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(header))
}

// Webhook posts notifications to a URL.
type Webhook struct {
	URL, Secret string
	// Client sends the requests; nil: one with AttemptTimeout.
	Client *http.Client
}

// Name is the webhook's scheme and host, never its path (which often
// holds a token, as Slack's do).
func (w Webhook) Name() string {
	u, err := url.Parse(w.URL)
	if err != nil {
		return "webhook (unparsable URL)"
	}
	return "webhook " + u.Scheme + "://" + u.Host
}

// Deliver posts the body once; 2xx is delivered, 408, 429 and 5xx (and
// a failure to connect) are worth another try, other answers are not.
func (w Webhook) Deliver(ctx context.Context, n Notification) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, strings.NewReader(string(n.Body)))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tollgate-alerts")
	req.Header.Set("X-Tollgate-Alert", n.ID)
	if w.Secret != "" {
		req.Header.Set(SignatureHeader, Sign(w.Secret, n.Body))
	}
	c := w.Client
	if c == nil {
		c = &http.Client{Timeout: AttemptTimeout}
	}
	resp, err := c.Do(req)
	if err != nil {
		return true, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch s := resp.StatusCode; {
	case s/100 == 2:
		return false, nil
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		return true, errors.New("answered " + strconv.Itoa(s))
	default:
		return false, errors.New("answered " + strconv.Itoa(s))
	}
}

// The queue's bounds.
const (
	// QueueSize bounds the deliveries waiting: past it, new ones are
	// dropped (and logged), never waited for.
	QueueSize = 256
	// Workers deliver at once: a receiver that hangs holds one.
	Workers = 4
	// AttemptTimeout bounds one attempt.
	AttemptTimeout = 5 * time.Second
	// MaxAttempts bounds the attempts of one delivery.
	MaxAttempts = 6
)

// Backoff is the wait before attempt+1 (attempt ≥ 1): base doubling,
// at most 30 times base, with up to a quarter more of jitter drawn from
// r in [0, 1).
func Backoff(base time.Duration, attempt int, r float64) time.Duration {
	d := base << min(max(attempt-1, 0), 5)
	return d + time.Duration(r*float64(d)/4)
}

// QueueConfig configures a Queue.
type QueueConfig struct {
	Targets []Target
	Logger  *slog.Logger
	// BaseBackoff is the first retry's wait (default 1 s).
	BaseBackoff time.Duration
}

// Queue delivers notifications to every target from a bounded queue.
type Queue struct {
	cfg     QueueConfig
	log     *slog.Logger
	jobs    chan job
	pending sync.WaitGroup // queued or being delivered
	start   sync.Once
}

type job struct {
	n      Notification
	target Target
}

// NewQueue returns a Queue; Start starts its workers.
func NewQueue(cfg QueueConfig) *Queue {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BaseBackoff <= 0 {
		cfg.BaseBackoff = time.Second
	}
	return &Queue{cfg: cfg, log: cfg.Logger, jobs: make(chan job, QueueSize)}
}

// Start starts the workers, once, until ctx ends.
func (q *Queue) Start(ctx context.Context) {
	q.start.Do(func() {
		for range Workers {
			go q.work(ctx)
		}
	})
}

// Enqueue queues n for every target and returns at once, whatever the
// targets do; a full queue drops the delivery (logged).
func (q *Queue) Enqueue(n Notification) {
	for _, t := range q.cfg.Targets {
		q.pending.Add(1)
		select {
		case q.jobs <- job{n: n, target: t}:
		default:
			q.pending.Done()
			q.log.Error("alert delivery dropped: the queue is full", "alert", n.ID, "target", t.Name(), "queue", QueueSize)
		}
	}
}

// Drain waits until every queued delivery is done, or ctx ends; it
// reports whether all were done. Inside Lambda, the reconciler drains
// before its run returns, since a frozen environment delivers nothing.
func (q *Queue) Drain(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { q.pending.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func (q *Queue) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-q.jobs:
			q.deliver(ctx, j)
			q.pending.Done()
		}
	}
}

// deliver makes the attempts of one delivery, logging how it ended.
func (q *Queue) deliver(ctx context.Context, j job) {
	var err error
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		var retry bool
		retry, err = j.target.Deliver(actx, j.n)
		cancel()
		if err == nil {
			q.log.Info("alert delivered", "alert", j.n.ID, "target", j.target.Name(), "attempts", attempt)
			return
		}
		if !retry || attempt == MaxAttempts {
			break
		}
		wait := Backoff(q.cfg.BaseBackoff, attempt, mrand.Float64())
		q.log.Warn("alert delivery failed; retrying", "alert", j.n.ID, "target", j.target.Name(), "attempt", attempt, "retry_in_ms", wait.Milliseconds(), "err", err.Error())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			q.log.Error("alert delivery abandoned: stopping", "alert", j.n.ID, "target", j.target.Name(), "attempts", attempt)
			return
		case <-t.C:
		}
	}
	q.log.Error("alert not delivered", "alert", j.n.ID, "target", j.target.Name(), "err", err.Error())
}
