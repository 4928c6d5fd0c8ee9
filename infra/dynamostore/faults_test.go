package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/storetest"
)

// faults is an HTTP client in front of the engine that answers chosen
// operations with a fault instead of passing them on, or after passing
// them on: what DynamoDB and the network between do on AWS and no local
// engine ever does. A fault is one of
//
//   - an AWS error answered without applying the call (throttling, a
//     conflict);
//   - lose: the call is applied and its answer lost (the connection resets
//     after the engine answered);
//   - apply500: the call is applied and answered with a 500;
//   - drop: the call is never sent, and the connection resets;
//   - hung: while set, every call is held until its context ends, as a
//     store that accepts connections and never answers holds it.
type faults struct {
	base aws.HTTPClient
	mu   sync.Mutex
	// next maps an operation ("UpdateItem", "TransactWriteItems", ...) to
	// the faults to answer its next matching calls with, in order.
	next  map[string][]fault
	calls map[string]int // calls that reached the engine, by operation
	hits  map[string]int // calls answered with a fault
	// down drops every call while set; hung holds every call until its
	// context ends.
	down atomic.Bool
	hung atomic.Bool
}

func newFaults() *faults {
	return &faults{
		base:  awshttp.NewBuildableClient(),
		next:  map[string][]fault{},
		calls: map[string]int{},
		hits:  map[string]int{},
	}
}

// Fault modes beyond an AWS error body.
const (
	lose     = "lose"
	apply500 = "apply500"
	drop     = "drop"
)

type fault struct {
	body  string // the AWS error answered, or a mode
	match string // only calls whose request body contains this
}

// inject answers the next count calls of op whose request contains match
// with the fault.
func (f *faults) inject(op string, count int, body, match string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range count {
		f.next[op] = append(f.next[op], fault{body: body, match: match})
	}
}

var errReset = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

func (f *faults) Do(r *http.Request) (*http.Response, error) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	var req []byte
	if r.Body != nil {
		req, _ = io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(req))
	}
	if f.down.Load() {
		f.mu.Lock()
		f.hits[op]++
		f.mu.Unlock()
		return nil, errReset
	}
	if f.hung.Load() {
		f.mu.Lock()
		f.hits[op]++
		f.mu.Unlock()
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	f.mu.Lock()
	var body string
	for i, ft := range f.next[op] {
		if bytes.Contains(req, []byte(ft.match)) {
			body = ft.body
			f.next[op] = append(f.next[op][:i:i], f.next[op][i+1:]...)
			f.hits[op]++
			break
		}
	}
	if body == "" || body == lose || body == apply500 {
		f.calls[op]++
	}
	f.mu.Unlock()
	switch body {
	case "":
		return f.base.Do(r)
	case drop:
		return nil, errReset
	case lose, apply500:
		res, err := f.base.Do(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if body == lose {
			return nil, errReset
		}
		body = internalError
		return &http.Response{
			StatusCode: 500, Status: "500 Internal Server Error",
			Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"injected"}},
			Body:    io.NopCloser(strings.NewReader(body)),
			Request: r,
		}, nil
	}
	return &http.Response{
		StatusCode: 400,
		Status:     "400 Bad Request",
		Header: http.Header{
			"Content-Type":     {"application/x-amz-json-1.0"},
			"X-Amzn-Requestid": {"injected"},
		},
		Body:    io.NopCloser(bytes.NewReader([]byte(body))),
		Request: r,
	}, nil
}

func (f *faults) count(m map[string]int, op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[op]
}

const (
	throttled = `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",` +
		`"message":"The level of configured provisioned throughput for the table was exceeded."}`
	conflict = `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException",` +
		`"message":"Transaction is ongoing for the item"}`
	internalError = `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}`
	txConflict    = `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",` +
		`"message":"Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict, None]",` +
		`"CancellationReasons":[{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"},{"Code":"None"}]}`
)

func faultyStore(t *testing.T, prefix string, f *faults) *dynamostore.Store {
	t.Helper()
	api := dynamotest.Client(t, dynamostore.ClientOptions{HTTPClient: f, MaxBackoff: 20 * time.Millisecond})
	return openStore(t, prefix, dynamostore.Options{API: api})
}

func TestInjectedThrottling(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	f := newFaults()
	s := faultyStore(t, prefix, f)
	ctx := context.Background()
	now := storetest.T0
	a := limiter.Charge{Counter: limiter.Counter{Rule: "thr-a", Kind: limiter.KindRequests, Window: 1}, Period: time.Minute, Limit: 5, Amount: 1}
	b := limiter.Charge{Counter: limiter.Counter{Rule: "thr-b", Kind: limiter.KindRequests, Window: 1}, Period: time.Minute, Limit: 5, Amount: 1}
	a.Counter.Window, b.Counter.Window = now.UnixNano()/int64(time.Minute), now.UnixNano()/int64(time.Minute)

	// Throttled twice, then through: the SDK's bounded, jittered retries
	// absorb it and the charge lands once.
	f.inject("UpdateItem", 2, throttled, "thr-a")
	out, err := s.Charge(ctx, now, []limiter.Charge{a}, nil)
	if err != nil || !out.Admitted || out.States[0].Cur != 1 {
		t.Fatalf("transient throttling: %+v, %v; want admitted once", out, err)
	}

	// Throttled on every attempt: after 4 attempts the store gives up with
	// ErrStoreUnavailable, and the other counter of the same charge, which
	// went through, is compensated.
	f.inject("UpdateItem", 4, throttled, "thr-b")
	_, err = s.Charge(ctx, now, []limiter.Charge{a, b}, nil)
	if !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("persistent throttling: %v, want ErrStoreUnavailable", err)
	}
	st, err := s.Read(ctx, now, []limiter.Charge{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Cur != 1 || st[1].Cur != 0 {
		t.Fatalf("after a failed charge counters hold %d and %d, want 1 and 0", st[0].Cur, st[1].Cur)
	}
}

func TestInjectedTransactionConflict(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	f := newFaults()
	s := faultyStore(t, prefix, f)
	ctx := context.Background()
	now := storetest.T0.Add(time.Second)
	w := now.UnixNano() / int64(time.Minute)
	hot := limiter.Charge{Counter: limiter.Counter{Rule: "hot", Kind: limiter.KindTokens, Window: w}, Period: time.Minute, Limit: 1000, Amount: 100}

	// On AWS a plain write to an item that a pending transaction (a
	// settlement, say) holds is refused with TransactionConflict. The
	// admission retries it and lands exactly once.
	f.inject("UpdateItem", 2, conflict, "")
	out, err := s.Charge(ctx, now, []limiter.Charge{hot}, nil)
	if err != nil || !out.Admitted {
		t.Fatalf("admission under a transient conflict: %+v, %v", out, err)
	}
	// A conflict that persists past the attempts is ErrContention, not a
	// refusal and not unavailability; nothing is left charged.
	f.inject("UpdateItem", 4, conflict, "")
	if _, err := s.Charge(ctx, now, []limiter.Charge{hot}, nil); !errors.Is(err, limiter.ErrContention) {
		t.Fatalf("persistent conflict: %v, want ErrContention", err)
	}

	// A settlement transaction cancelled by a conflict is retried, and
	// applies once.
	l := &limiter.Lease{ID: "conflicted-settlement", ExpiresAt: now.Add(time.Hour), Charges: []limiter.Charge{hot},
		Reserved: limiter.Usage{InputTokens: 100}}
	f.inject("TransactWriteItems", 2, txConflict, "")
	settle := []limiter.Settlement{{Lease: l, Used: limiter.Usage{InputTokens: 40, Exact: true}}}
	if n, err := s.Settle(ctx, settle); err != nil || n != 1 {
		t.Fatalf("settle under transient conflicts: applied %d, %v", n, err)
	}
	if n, err := s.Settle(ctx, settle); err != nil || n != 0 {
		t.Fatalf("settled twice: applied %d, %v", n, err)
	}
	st, err := s.Read(ctx, now, []limiter.Charge{hot})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Cur != 40 {
		t.Fatalf("hot counter %d after one admission settled to 40 tokens, want 40", st[0].Cur)
	}
	if got := f.count(f.hits, "TransactWriteItems"); got != 2 {
		t.Fatalf("%d injected transaction conflicts were met, want 2", got)
	}
	// Persistent: the store reports contention and has applied nothing.
	l2 := &limiter.Lease{ID: "never-settles", ExpiresAt: now.Add(time.Hour), Charges: []limiter.Charge{hot},
		Reserved: limiter.Usage{InputTokens: 100}}
	f.inject("TransactWriteItems", 20, txConflict, "")
	_, err = s.Settle(ctx, []limiter.Settlement{{Lease: l2, Used: limiter.Usage{InputTokens: 10, Exact: true}}})
	if !errors.Is(err, limiter.ErrContention) {
		t.Fatalf("persistent transaction conflict: %v, want ErrContention", err)
	}
	if st, _ := s.Read(ctx, now, []limiter.Charge{hot}); st[0].Cur != 40 {
		t.Fatalf("a settlement that never committed changed the counter to %d", st[0].Cur)
	}
}

// A store that accepts and never answers holds no admission past its
// caller's deadline: the charge fails with ErrStoreUnavailable by then,
// whatever verification and undo it still has to do, and the store works
// again once the engine answers.
func TestHungStoreAnswersByTheDeadline(t *testing.T) {
	prefix := dynamotest.Prefix(t)
	f := newFaults()
	s := faultyStore(t, prefix, f)
	now := storetest.T0
	w := now.UnixNano() / int64(time.Minute)
	win := limiter.Charge{Counter: limiter.Counter{Rule: "hung-w", Kind: limiter.KindRequests, Window: w}, Period: time.Minute, Limit: 5, Amount: 1}
	slot := limiter.Charge{Counter: limiter.Counter{Rule: "hung-g", Kind: limiter.KindInFlight}, Limit: 5, Amount: 1}
	lease := &limiter.Lease{ID: "hung-1", AdmittedAt: now, ExpiresAt: now.Add(time.Hour), Charges: []limiter.Charge{win, slot}}
	f.hung.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Charge(ctx, now, []limiter.Charge{win, slot}, lease)
	took := time.Since(start)
	if !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("charge on a hung store: %v, want ErrStoreUnavailable", err)
	}
	if took > 2*time.Second { // a bound, with slack: the deadline is 200 ms
		t.Fatalf("the charge answered after %v, past its caller's 200 ms deadline", took)
	}
	f.hung.Store(false)
	out, err := s.Charge(context.Background(), now, []limiter.Charge{win}, nil)
	if err != nil || !out.Admitted {
		t.Fatalf("once the engine answers again: %+v, %v", out, err)
	}
}
