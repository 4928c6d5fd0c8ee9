package notify

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// A receiver that answers 500 twice, then 200, gets the notification on
// the third attempt, signed with the secret.
func TestRetriesUntilTheReceiverRecovers(t *testing.T) {
	var calls atomic.Int32
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !Verify("s3cret", b, r.Header.Get(SignatureHeader)) {
			t.Errorf("bad signature %q", r.Header.Get(SignatureHeader))
		}
		if calls.Add(1) <= 2 {
			w.WriteHeader(500)
			return
		}
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	q := NewQueue(QueueConfig{Targets: []Target{Webhook{URL: srv.URL + "/hook", Secret: "s3cret"}}, BaseBackoff: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q.Start(ctx)
	q.Enqueue(Notification{ID: "a|firing", Body: []byte(`{"text":"hi"}`)})
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if !q.Drain(dctx) {
		t.Fatal("not drained")
	}
	if calls.Load() != 3 || len(got) != 1 || got[0] != `{"text":"hi"}` {
		t.Fatalf("%d calls, delivered %v", calls.Load(), got)
	}
}

// A 4xx other than 408 and 429 is not retried; 429 is.
func TestWhatIsRetried(t *testing.T) {
	for _, c := range []struct {
		status int
		retry  bool
	}{{200, false}, {204, false}, {400, false}, {404, false}, {408, true}, {429, true}, {500, true}, {503, true}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(c.status) }))
		retry, err := Webhook{URL: srv.URL}.Deliver(context.Background(), Notification{Body: []byte(`{}`)})
		srv.Close()
		if retry != c.retry || (err == nil) != (c.status/100 == 2) {
			t.Errorf("%d: retry %v err %v", c.status, retry, err)
		}
	}
}

// Enqueue never blocks: with every worker held by a receiver that hangs
// and the queue full, it drops and returns at once.
func TestEnqueueNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	q := NewQueue(QueueConfig{Targets: []Target{Webhook{URL: srv.URL}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q.Start(ctx)
	start := time.Now()
	for range QueueSize + Workers + 50 {
		q.Enqueue(Notification{ID: "x", Body: []byte(`{}`)})
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("enqueueing took %v", d)
	}
	dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer dcancel()
	if q.Drain(dctx) {
		t.Fatal("drained while the receiver hangs")
	}
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{{1, 0, time.Second}, {2, 0, 2 * time.Second}, {3, 0.5, 4*time.Second + 500*time.Millisecond}, {6, 0, 32 * time.Second}, {60, 0, 32 * time.Second}, {0, 0, time.Second}} {
		if got := Backoff(time.Second, c.attempt, c.r); got != c.want {
			t.Errorf("attempt %d: %v, want %v", c.attempt, got, c.want)
		}
	}
}

func TestWebhookNameHidesThePath(t *testing.T) {
	if n := (Webhook{URL: "https://hooks.slack.com/services/T000/B000/XXXX"}).Name(); n != "webhook https://hooks.slack.com" {
		t.Fatal(n)
	}
}

// SNS: a Publish of the topic, signed for sns in the topic's region.
func TestSNSPublish(t *testing.T) {
	var form url.Values
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		form, _ = url.ParseQuery(string(b))
		auth = r.Header.Get("Authorization")
		_, _ = io.WriteString(w, `<PublishResponse><PublishResult><MessageId>m</MessageId></PublishResult></PublishResponse>`)
	}))
	defer srv.Close()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}
	s, err := NewSNS("arn:aws:sns:eu-west-1:123456789012:alerts", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoint = srv.URL
	if _, err := s.Deliver(context.Background(), Notification{Subject: "budget at 80 %", Body: []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if form.Get("Action") != "Publish" || form.Get("TopicArn") != "arn:aws:sns:eu-west-1:123456789012:alerts" || form.Get("Message") != `{"a":1}` || form.Get("Subject") != "budget at 80 %" {
		t.Fatalf("form %v", form)
	}
	if !strings.Contains(auth, "/eu-west-1/sns/aws4_request") {
		t.Fatalf("signed %q", auth)
	}
	if _, err := NewSNS("arn:aws:sqs:eu-west-1:1:q", cfg); err == nil {
		t.Fatal("an SQS ARN was taken")
	}
}
