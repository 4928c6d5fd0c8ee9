package configstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/configstore"
	"github.com/tollgate/tollgate/infra/dynamostore"
	"github.com/tollgate/tollgate/infra/dynamostore/dynamotest"
	"github.com/tollgate/tollgate/limiter"
)

type store interface {
	configstore.Source
	PutRule(ctx context.Context, r configstore.Rule, from limiter.RuleKey, version int64) (configstore.Rule, error)
	DeleteRule(ctx context.Context, key limiter.RuleKey, version int64) error
	Regenerate(ctx context.Context, keys []limiter.RuleKey) error
	PutKey(ctx context.Context, k configstore.Key) error
	Keys(ctx context.Context) ([]configstore.Key, error)
	RevokeKey(ctx context.Context, id string) (configstore.Key, error)
	configstore.Layouts
	PutBatch(ctx context.Context, b configstore.Batch) error
	PendingBatches(ctx context.Context, cursor string, limit int) ([]configstore.Batch, string, error)
	FailBatch(ctx context.Context, b configstore.Batch, next time.Time) error
	FinishBatch(ctx context.Context, b configstore.Batch) error
	PutSession(ctx context.Context, s configstore.Session) error
	TakeSession(ctx context.Context, id, within string) (configstore.Session, error)
}

// The same behaviour from both stores.
func TestMemory(t *testing.T) { suite(t, func(t *testing.T) store { return configstore.NewMemory() }) }

func TestDynamo(t *testing.T) {
	dynamotest.Endpoint(t)
	suite(t, func(t *testing.T) store {
		prefix := dynamotest.Prefix(t)
		return configstore.NewDynamo(dynamotest.Client(t, dynamostore.ClientOptions{}), prefix+dynamostore.SuffixConfig)
	})
}

func rule(subject string, period time.Duration, max int64) configstore.Rule {
	return configstore.Rule{Rule: limiter.Rule{Scope: limiter.ScopeUserPath, Subject: subject, Period: period, MaxRequests: max, Source: limiter.SourceManual}}
}

func suite(t *testing.T, open func(t *testing.T) store) {
	ctx := context.Background()
	t.Run("BatchesPage", func(t *testing.T) {
		s := open(t)
		t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		for i := range 7 {
			if err := s.PutBatch(ctx, configstore.Batch{Provider: "openai", ID: fmt.Sprintf("b%d", 6-i), UserPath: "/t", SubmittedAt: t0}); err != nil {
				t.Fatal(err)
			}
		}
		var ids []string
		cursor, pages := "", 0
		for {
			page, next, err := s.PendingBatches(ctx, cursor, 3)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, b := range page {
				ids = append(ids, b.ID)
			}
			if cursor = next; next == "" || pages > 5 {
				break
			}
		}
		if strings.Join(ids, ",") != "b0,b1,b2,b3,b4,b5,b6" || pages != 3 {
			t.Fatalf("paged %v in %d pages, want b0…b6 in provider/id order in 3", ids, pages)
		}
		b := configstore.Batch{Provider: "openai", ID: "b3"}
		next := t0.Add(time.Minute)
		for range 2 {
			if err := s.FailBatch(ctx, b, next); err != nil {
				t.Fatal(err)
			}
		}
		page, _, _ := s.PendingBatches(ctx, "openai/b2", 1)
		if len(page) != 1 || page[0].ID != "b3" || page[0].Failures != 2 || !page[0].NextPoll.Equal(next) {
			t.Fatalf("after two failed polls: %+v", page)
		}
		if err := s.FinishBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := s.FailBatch(ctx, b, next); err != nil {
			t.Fatalf("failing a finished batch: %v", err)
		}
		if page, _, _ := s.PendingBatches(ctx, "openai/b2", 1); len(page) != 1 || page[0].ID != "b4" {
			t.Fatalf("a finished batch is still pending (or came back): %+v", page)
		}
	})
	t.Run("SessionsTakenByTheirCallerOnly", func(t *testing.T) {
		s := open(t)
		lease := limiter.Lease{ID: "l1", ExpiresAt: time.Now().Add(time.Hour)}
		if err := s.PutSession(ctx, configstore.Session{Provider: "openai", ID: "sess_1", UserPath: "/Team/Alice", Lease: lease}); err != nil {
			t.Fatal(err)
		}
		for _, other := range []string{"/team/bob", "/team/alice-2", "/team/alice/app"} {
			if _, err := s.TakeSession(ctx, "sess_1", other); !errors.Is(err, configstore.ErrNotFound) {
				t.Fatalf("taken by %s: %v", other, err)
			}
		}
		got, err := s.TakeSession(ctx, "sess_1", "/team")
		if err != nil || got.Lease.ID != "l1" || got.UserPath != "/Team/Alice" {
			t.Fatalf("taken by a caller above it (case folded): %+v %v", got, err)
		}
		if _, err := s.TakeSession(ctx, "sess_1", "/"); !errors.Is(err, configstore.ErrNotFound) {
			t.Fatalf("taken twice: %v", err)
		}
	})
	t.Run("Layouts", func(t *testing.T) {
		s := open(t)
		k := limiter.MakeRuleKey(limiter.ScopeProvider, "hot", time.Minute)
		at := time.Date(2026, 3, 2, 0, 1, 0, 0, time.UTC)
		l := configstore.Layout{History: []limiter.ShardLayout{{Shards: 1}, {Shards: 4, Since: at}}, Generation: "g1", Writer: at.Add(-time.Hour)}
		v0, _ := s.Version(ctx)
		if err := s.SetLayout(ctx, k, l, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.SetLayout(ctx, k, l, 0); !errors.Is(err, configstore.ErrLayoutChanged) {
			t.Fatalf("recording over an existing record at version 0: %v", err)
		}
		snap, _ := s.Snapshot(ctx)
		got := snap.Layouts[k]
		if got.Version != 1 || got.Generation != "g1" || !got.Writer.Equal(l.Writer) || len(got.History) != 2 ||
			got.History[1].Shards != 4 || !got.History[1].Since.Equal(at) || !got.History[0].Since.IsZero() {
			t.Fatalf("recorded %+v", got)
		}
		if v1, _ := s.Version(ctx); v1 == v0 {
			t.Fatal("recording a layout did not change the store's version")
		}
		l.History = append(l.History, limiter.ShardLayout{Shards: 2, Since: at.Add(time.Hour)})
		if err := s.SetLayout(ctx, k, l, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.SetLayout(ctx, k, l, 1); !errors.Is(err, configstore.ErrLayoutChanged) {
			t.Fatalf("a stale version: %v", err)
		}
	})
	t.Run("Rules", func(t *testing.T) {
		s := open(t)
		v0, _ := s.Version(ctx)
		r, err := s.PutRule(ctx, rule("/a", time.Minute, 5), "", 0)
		if err != nil || r.Version != 1 {
			t.Fatal(r, err)
		}
		key := r.Key()
		var conflict *configstore.ConflictError
		if _, err := s.PutRule(ctx, rule("/a", time.Minute, 6), "", 0); !errors.As(err, &conflict) || conflict.Current.Version != 1 {
			t.Fatalf("create over an existing rule: %v", err)
		}
		if _, err := s.PutRule(ctx, rule("/a", time.Minute, 7), key, 9); !errors.As(err, &conflict) {
			t.Fatalf("stale version: %v", err)
		}
		snap, _ := s.Snapshot(ctx)
		gen := snap.Generations[key]
		up, err := s.PutRule(ctx, rule("/a", time.Minute, 7), key, 1)
		if err != nil || up.Version != 2 || up.MaxRequests != 7 {
			t.Fatal(up, err)
		}
		if snap, _ := s.Snapshot(ctx); snap.Generations[key] != gen {
			t.Fatal("editing limits restarted the counters")
		}
		moved, err := s.PutRule(ctx, rule("/b", time.Minute, 7), key, 2)
		if err != nil || moved.Key() == key {
			t.Fatal(moved, err)
		}
		snap, _ = s.Snapshot(ctx)
		if len(snap.Rules) != 1 || snap.Rules[0].Key() != moved.Key() || snap.Generations[moved.Key()] == "" {
			t.Fatalf("after the move %+v", snap)
		}
		before := snap.Generations[moved.Key()]
		if err := s.Regenerate(ctx, []limiter.RuleKey{moved.Key(), "user_path:/config:60"}); err != nil {
			t.Fatal(err)
		}
		snap, _ = s.Snapshot(ctx)
		if snap.Generations[moved.Key()] == before || snap.Generations["user_path:/config:60"] == "" {
			t.Fatalf("regenerate %+v", snap.Generations)
		}
		if err := s.DeleteRule(ctx, moved.Key(), 1); !errors.As(err, &conflict) {
			t.Fatalf("delete at a stale version: %v", err)
		}
		if err := s.DeleteRule(ctx, moved.Key(), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRule(ctx, moved.Key(), 0); !errors.Is(err, configstore.ErrNotFound) {
			t.Fatalf("delete twice: %v", err)
		}
		if v, _ := s.Version(ctx); v <= v0 {
			t.Fatalf("version %d after changes, was %d", v, v0)
		}
	})
	t.Run("Keys", func(t *testing.T) {
		s := open(t)
		secret := configstore.NewSecret()
		h := configstore.Hash(secret)
		k := configstore.Key{ID: configstore.KeyID(h), Hash: h, Prefix: secret[:9], UserPath: "/t", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
		if err := s.PutKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := s.PutKey(ctx, k); !errors.Is(err, configstore.ErrExists) {
			t.Fatalf("duplicate: %v", err)
		}
		got, err := s.KeyByHash(ctx, h)
		if err != nil || got.UserPath != "/t" || got.ID != k.ID || !got.Live(time.Now()) {
			t.Fatal(got, err)
		}
		if _, err := s.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.KeyByHash(ctx, h); got.Live(time.Now()) {
			t.Fatal("revoked key still live")
		}
		if _, err := s.RevokeKey(ctx, "key_ffffffffffffffff"); !errors.Is(err, configstore.ErrNotFound) {
			t.Fatalf("revoke unknown: %v", err)
		}
		if ks, _ := s.Keys(ctx); len(ks) != 1 {
			t.Fatalf("keys %+v", ks)
		}
	})
}
