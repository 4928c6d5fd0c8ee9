package configstore_test

import (
	"context"
	"errors"
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
