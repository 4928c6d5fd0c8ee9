package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/infra/dynamostream"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/reconcile"
)

// reconcileFixture is a limiter on the DynamoDB store and a reconciler
// reading the lease table's stream.
type reconcileFixture struct {
	prefix  string
	db      *dynamodb.Client
	store   *dynamostore.Store
	limiter *limiter.Limiter
	table   *failingTable
}

func newReconcileFixture(t testing.TB, rules ...limiter.Rule) *reconcileFixture {
	t.Helper()
	f := &reconcileFixture{prefix: dynamotest.Prefix(t), db: dynamotest.Client(t, dynamostore.ClientOptions{})}
	var err error
	f.store, err = dynamostore.New(dynamostore.Options{API: f.db, TablePrefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := limiter.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	f.limiter, err = limiter.New(limiter.Config{Store: f.store, Rules: rs, LeaseTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f.table = &failingTable{TableAPI: f.db}
	return f
}

// reconciler returns a reconciler with a fresh reader, as each scheduled
// run has.
func (f *reconcileFixture) reconciler(t testing.TB, now func() time.Time) *reconcile.Reconciler {
	t.Helper()
	streams, err := dynamostream.NewStreamsClient(context.Background(), dynamotest.StreamsConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	rd, err := dynamostream.NewReader(dynamostream.Options{Streams: streams, Table: f.table, TablePrefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := reconcile.New(reconcile.Config{Source: rd, Store: f.store, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// failingTable fails the next checkpoint writes on demand: the reconciler
// stopped between applying a batch and recording that it did.
type failingTable struct {
	dynamostream.TableAPI
	mu   sync.Mutex
	fail int
	// noDescribe makes DescribeTable fail, so the reader finds the stream
	// through ListStreams.
	noDescribe bool
}

func (f *failingTable) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	if f.noDescribe {
		return nil, errors.New("injected: not authorized to describe the table")
	}
	return f.TableAPI.DescribeTable(ctx, in, o...)
}

func (f *failingTable) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	if f.fail > 0 {
		f.fail--
		f.mu.Unlock()
		return nil, errors.New("injected: the process stopped before the checkpoint write")
	}
	f.mu.Unlock()
	return f.TableAPI.UpdateItem(ctx, in, o...)
}

func (f *reconcileFixture) read(t testing.TB, now time.Time, rules []limiter.Rule) map[string]int64 {
	t.Helper()
	us, err := f.limiter.AllUsage(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, u := range us {
		for _, d := range u.Dimensions {
			out[string(u.Rule.Key())+"/"+d.Kind.String()] = d.Used
		}
	}
	return out
}

var tokenRules = []limiter.Rule{
	{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Window{Period: time.Minute, MaxTokens: 1 << 40}},
	{Scope: limiter.ScopeProvider, Subject: "openai", Limit: limiter.Window{Period: time.Hour, MaxRequests: 1 << 40, MaxTokens: 1 << 40}},
	{Scope: limiter.ScopeModel, Subject: "openai/gpt-4o", Limit: limiter.Window{Period: time.Minute, MaxInputTokens: 1 << 40, MaxOutputTokens: 1 << 40}},
	{Scope: limiter.ScopeUserPath, Subject: "/team", Limit: limiter.Gauge{MaxInFlight: 1000}},
}

// admitAndComplete admits n requests with random reservations and
// completes each with random actual usage; it returns the expected
// counter values after reconciliation.
func admitAndComplete(t testing.TB, f *reconcileFixture, now time.Time, n int, rng *rand.Rand) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	want := map[string]int64{}
	for i := range n {
		in, out := 10+rng.Int64N(500), 1+rng.Int64N(800)
		d, err := f.limiter.Admit(ctx, now, limiter.Request{
			ID:      fmt.Sprintf("%s-req-%d", f.prefix, i),
			Subject: limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
			Route:   "chat", InputTokens: in, OutputTokens: out,
		})
		if err != nil || !d.Allowed {
			t.Fatalf("admission %d: %v %+v", i, err, d.Refused)
		}
		// Actual usage is off the estimate either way: the prompt by a
		// few tokens, the output anywhere up to 1.5× the cap.
		used := limiter.Usage{InputTokens: in + rng.Int64N(21) - 10, OutputTokens: rng.Int64N(out*3/2 + 1), Exact: true}
		if err := f.limiter.Complete(ctx, now, d.Lease, used); err != nil {
			t.Fatal(err)
		}
		want["user_path:/team:60/tok"] += used.Total()
		want["provider:openai:3600/tok"] += used.Total()
		want["provider:openai:3600/req"]++
		want["model:openai/gpt-4o:60/in"] += used.InputTokens
		want["model:openai/gpt-4o:60/out"] += used.OutputTokens
		want["user_path:/team:c/fly"] += 0
	}
	return want
}

func checkCounters(t testing.TB, got, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
}

func TestReconcileExactlyOnce(t *testing.T) {
	f := newReconcileFixture(t, tokenRules...)
	now := time.Now().Truncate(time.Hour).Add(5 * time.Second)
	clock := func() time.Time { return now }
	want := admitAndComplete(t, f, now, 60, rand.New(rand.NewPCG(1, 2)))

	// Before reconciling, the windows hold the reservations.
	if got := f.read(t, now, tokenRules); got["user_path:/team:60/tok"] == want["user_path:/team:60/tok"] {
		t.Fatal("windows already equal actual usage before the reconciler ran; the test proves nothing")
	}

	// One run: every token window equals the sum of actual usage.
	rep, err := f.reconciler(t, clock).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 60 || rep.Settled != 60 {
		t.Fatalf("run: %+v, want 60 completed and settled", rep)
	}
	checkCounters(t, f.read(t, now, tokenRules), want)

	// Replay from an older checkpoint (the checkpoints are gone): every
	// record is read again and changes nothing.
	f.dropCheckpoints(t)
	rep, err = f.reconciler(t, clock).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 60 || rep.Settled != 0 || rep.Duplicates != 60 {
		t.Fatalf("replay: %+v, want 60 completed, 0 settled, 60 duplicates", rep)
	}
	checkCounters(t, f.read(t, now, tokenRules), want)
}

func (f *reconcileFixture) dropCheckpoints(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	table := f.prefix + dynamostore.SuffixCounters
	out, err := f.db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, item := range out.Items {
		pk := item["pk"].(*types.AttributeValueMemberS).Value
		if len(pk) > 11 && pk[:11] == "checkpoint|" {
			if _, err := f.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": item["pk"]}}); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no checkpoint to drop")
	}
}

func TestReconcileStoppedBeforeCheckpoint(t *testing.T) {
	f := newReconcileFixture(t, tokenRules...)
	now := time.Now().Truncate(time.Hour).Add(5 * time.Second)
	clock := func() time.Time { return now }
	want := admitAndComplete(t, f, now, 25, rand.New(rand.NewPCG(3, 4)))

	// The run applies its batch, then dies before the checkpoint write.
	// (This run finds the stream through ListStreams.)
	f.table.noDescribe = true
	f.table.fail = 1
	if _, err := f.reconciler(t, clock).Run(context.Background()); err == nil {
		t.Fatal("the run did not report the failed checkpoint")
	}
	checkCounters(t, f.read(t, now, tokenRules), want)
	// The next run reads the same records again: no double charge.
	rep, err := f.reconciler(t, clock).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Settled != 0 || rep.Duplicates != 25 {
		t.Fatalf("rerun: %+v, want every settlement seen as a duplicate", rep)
	}
	checkCounters(t, f.read(t, now, tokenRules), want)
}

// A request whose process dies holds its slot until its lease expires,
// and from then on nothing counts it: its gauge entry carries the expiry,
// so no sweep is needed (the reconciler finds none to do). Its
// reservation stays charged, and nothing is settled for it.
func TestReconcileDeadProcess(t *testing.T) {
	f := newReconcileFixture(t, tokenRules...)
	ctx := context.Background()
	now := time.Now().Truncate(time.Hour).Add(5 * time.Second)
	d, err := f.limiter.Admit(ctx, now, limiter.Request{
		ID: f.prefix + "dies", Subject: limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
		Route: "chat", InputTokens: 100, OutputTokens: 400,
	})
	if err != nil || !d.Allowed {
		t.Fatal(err)
	}
	// The process dies: no completion. Its slot is held until the lease
	// expires...
	if got := f.read(t, now.Add(9*time.Minute), tokenRules)["user_path:/team:c/fly"]; got != 1 {
		t.Fatalf("slot before expiry: %d in flight, want 1", got)
	}
	// ...and free from then on; the reservation stays charged.
	after := now.Add(10 * time.Minute)
	if got := f.read(t, after, tokenRules)["user_path:/team:c/fly"]; got != 0 {
		t.Fatalf("slot still held at the lease's expiry: %d", got)
	}
	if got := f.read(t, now, tokenRules); got["user_path:/team:60/tok"] != 500 || got["model:openai/gpt-4o:60/out"] != 400 {
		t.Fatalf("reservation not kept: %v", got)
	}
	// The reconciler has nothing to sweep and nothing to settle.
	rep, err := f.reconciler(t, func() time.Time { return after }).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Swept != 0 || rep.Read != 0 || rep.Settled != 0 {
		t.Fatalf("run: %+v, want nothing read, swept or settled", rep)
	}
}

// A completion whose slot could not be given back (the store failed just
// then) says so in its record, and the reconciler gives the slot back
// from it, once however often the record is read: the slot is not left to
// the lease's expiry.
func TestReconcileReleasesWhatCompletionCouldNot(t *testing.T) {
	f := newReconcileFixture(t, tokenRules...)
	ctx := context.Background()
	now := time.Now().Truncate(time.Hour).Add(5 * time.Second)
	failing, err := dynamostore.New(dynamostore.Options{API: noRelease{f.db}, TablePrefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.limiter.Admit(ctx, now, limiter.Request{
		ID: f.prefix + "unreleased", Subject: limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
		Route: "chat", InputTokens: 10, OutputTokens: 10,
	})
	if err != nil || !d.Allowed {
		t.Fatal(err)
	}
	if err := failing.Complete(ctx, now, d.Lease, limiter.Usage{InputTokens: 10, OutputTokens: 5, Exact: true}); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, now, tokenRules)["user_path:/team:c/fly"]; got != 1 {
		t.Fatalf("gauge %d, want the slot the completion could not give back", got)
	}
	clock := func() time.Time { return now }
	rep, err := f.reconciler(t, clock).Run(ctx)
	if err != nil || rep.Released != 1 || rep.Settled != 1 {
		t.Fatalf("run: %+v %v, want the slot released and the lease settled", rep, err)
	}
	f.dropCheckpoints(t)
	if rep, err := f.reconciler(t, clock).Run(ctx); err != nil || rep.Released != 0 || rep.Settled != 0 {
		t.Fatalf("replay: %+v %v, want nothing released or settled twice", rep, err)
	}
	if got := f.read(t, now, tokenRules)["user_path:/team:c/fly"]; got != 0 {
		t.Fatalf("gauge %d after release, want 0", got)
	}
}

// noRelease is a DynamoDB client on which giving a slot back fails.
type noRelease struct{ *dynamodb.Client }

func (c noRelease) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.HasPrefix(aws.ToString(in.UpdateExpression), "DELETE ") {
		return nil, errors.New("injected: the store failed")
	}
	return c.Client.UpdateItem(ctx, in, o...)
}

// A request that outlives its lease (its process stalled, no renewal got
// through) has its slot given back at expiry and its reservation kept.
// When it completes after all, its usage is still recorded and settled,
// once: before, a completion after expiry was silently dropped.
func TestLateCompletionSettled(t *testing.T) {
	f := newReconcileFixture(t, tokenRules...)
	ctx := context.Background()
	now := time.Now().Truncate(time.Hour).Add(5 * time.Second)
	d, err := f.limiter.Admit(ctx, now, limiter.Request{
		ID: f.prefix + "late", Subject: limiter.Subject{UserPath: "/team/app", Provider: "openai", Model: "gpt-4o"},
		Route: "chat", InputTokens: 100, OutputTokens: 900,
	})
	if err != nil || !d.Allowed {
		t.Fatal(err)
	}
	expired := now.Add(11 * time.Minute) // past the fixture's 10 min lease
	if got := f.read(t, expired, tokenRules)["user_path:/team:c/fly"]; got != 0 {
		t.Fatalf("slot still held past the lease's expiry: %d", got)
	}
	if got := f.read(t, now, tokenRules); got["user_path:/team:60/tok"] != 1000 {
		t.Fatalf("after expiry: %v, want the reservation kept and the slot given back", got)
	}
	if err := f.limiter.Complete(ctx, expired, d.Lease, limiter.Usage{InputTokens: 100, OutputTokens: 50, Exact: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // once, however often its record is read
		if i > 0 {
			f.dropCheckpoints(t)
		}
		if _, err := f.reconciler(t, func() time.Time { return expired }).Run(ctx); err != nil {
			t.Fatal(err)
		}
		got := f.read(t, now, tokenRules)
		if got["user_path:/team:60/tok"] != 150 || got["model:openai/gpt-4o:60/out"] != 50 || got["user_path:/team:c/fly"] != 0 {
			t.Fatalf("after the late completion settled: %v, want 150 tokens (50 out) and nothing in flight", got)
		}
	}
}
