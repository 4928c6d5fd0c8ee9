package configstore_test

import (
	"context"
	"encoding/json"
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
	KeyByID(ctx context.Context, id string) (configstore.Key, error)
	configstore.Layouts
	PutBatch(ctx context.Context, b configstore.Batch) error
	PendingBatches(ctx context.Context, cursor string, limit int) ([]configstore.Batch, string, error)
	FailBatch(ctx context.Context, b configstore.Batch, next time.Time) error
	FinishBatch(ctx context.Context, b configstore.Batch) error
	PutSession(ctx context.Context, s configstore.Session) error
	TakeSession(ctx context.Context, id, within string) (configstore.Session, error)
	FireAlert(ctx context.Context, a configstore.Alert) (bool, error)
	ResolveAlert(ctx context.Context, id string, at time.Time, doc json.RawMessage) (configstore.Alert, bool, error)
	Alerts(ctx context.Context) ([]configstore.Alert, error)
	PutAudit(ctx context.Context, e configstore.AuditEntry, retention time.Duration) error
	Audit(ctx context.Context, q configstore.AuditQuery) (configstore.AuditPage, error)
	PutDowngrade(ctx context.Context, d configstore.Downgrade) error
	DeleteDowngrade(ctx context.Context, key string) error
	configstore.Migrators
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
	return configstore.Rule{Rule: limiter.Rule{Scope: limiter.ScopeUserPath, Subject: subject, Limit: limiter.Window{Period: period, MaxRequests: max}, Source: limiter.SourceManual}}
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
		k := limiter.MakeRuleKey(limiter.ScopeProvider, "hot", limiter.Window{Period: time.Minute})
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
		if err != nil || up.Version != 2 || up.Limit != (limiter.Window{Period: time.Minute, MaxRequests: 7}) {
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
		admin := k
		secret2 := configstore.NewSecret()
		admin.Hash, admin.Prefix, admin.Admin, admin.UserPath = configstore.Hash(secret2), secret2[:9], true, "/partners/acme"
		admin.ID = configstore.KeyID(admin.Hash)
		if err := s.PutKey(ctx, admin); err != nil {
			t.Fatal(err)
		}
		if got, err := s.KeyByID(ctx, admin.ID); err != nil || !got.Admin || got.UserPath != "/partners/acme" {
			t.Fatalf("KeyByID of an admin key: %+v %v", got, err)
		}
		if got, err := s.KeyByHash(ctx, admin.Hash); err != nil || !got.Admin {
			t.Fatalf("KeyByHash of an admin key: %+v %v", got, err)
		}
		if _, err := s.KeyByID(ctx, "key_ffffffffffffffff"); !errors.Is(err, configstore.ErrNotFound) {
			t.Fatalf("KeyByID unknown: %v", err)
		}
	})
	t.Run("Downgrades", func(t *testing.T) {
		s := open(t)
		t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		a := configstore.Downgrade{From: "openai/gpt-4o", To: "openai/gpt-4o-mini", Refused: true, Classes: []string{"batch"}, CreatedAt: t0}
		b := configstore.Downgrade{From: "anthropic/claude-sonnet-4", To: "anthropic/claude-haiku-4", BudgetBelow: 0.1, Classes: []string{"background"}, CreatedAt: t0.Add(time.Minute)}
		before, _ := s.Snapshot(ctx)
		for _, d := range []configstore.Downgrade{b, a} {
			if err := s.PutDowngrade(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Version == before.Version || len(snap.Downgrades) != 2 || snap.Downgrades[0].Key() != a.Key() || snap.Downgrades[1].BudgetBelow != 0.1 ||
			!snap.Downgrades[0].CreatedAt.Equal(t0) || snap.Downgrades[0].Classes[0] != "batch" {
			t.Fatalf("downgrades read back as %+v (version %d after %d), want a then b", snap.Downgrades, snap.Version, before.Version)
		}
		a.Classes = []string{"batch", "background"} // a replacement keeps one item
		if err := s.PutDowngrade(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteDowngrade(ctx, b.Key()); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteDowngrade(ctx, b.Key()); !errors.Is(err, configstore.ErrNotFound) {
			t.Fatalf("deleting it again: %v, want ErrNotFound", err)
		}
		snap, _ = s.Snapshot(ctx)
		if len(snap.Downgrades) != 1 || len(snap.Downgrades[0].Classes) != 2 {
			t.Fatalf("after a replacement and a delete: %+v", snap.Downgrades)
		}
	})
	t.Run("Migrations", func(t *testing.T) { migrationSuite(t, open(t)) })
	t.Run("AlertsFireOncePerPeriod", func(t *testing.T) { alertSuite(t, open(t)) })
	t.Run("AuditPages", func(t *testing.T) { auditSuite(t, open(t)) })
}

// An alert fires once per period, whoever tries: of two writers at once
// one fires it; it does not fire again while firing, nor in the same
// period after it resolved; it fires again in a later period. A
// resolution is made once.
func alertSuite(t *testing.T, s store) {
	ctx := context.Background()
	// Near now: DynamoDB Local deletes items past their TTL, as AWS does.
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	a := configstore.Alert{ID: "use|budget:user_path:/a:month|0.5", Period: "2026-03", FiredAt: t0, Doc: json.RawMessage(`{"n":1}`)}
	results := make(chan bool, 2)
	for range 2 {
		go func() {
			ok, err := s.FireAlert(ctx, a)
			if err != nil {
				t.Error(err)
			}
			results <- ok
		}()
	}
	if first, second := <-results, <-results; first == second {
		t.Fatalf("two writers at once: fired %v and %v, want exactly one", first, second)
	}
	if ok, _ := s.FireAlert(ctx, a); ok {
		t.Fatal("fired again while firing")
	}
	as, err := s.Alerts(ctx)
	if err != nil || len(as) != 1 || !as[0].Active || as[0].Period != "2026-03" || !as[0].FiredAt.Equal(t0) || string(as[0].Doc) != `{"n":1}` {
		t.Fatalf("listed %+v %v", as, err)
	}
	was, ok, err := s.ResolveAlert(ctx, a.ID, t0.Add(time.Hour), json.RawMessage(`{"n":2}`))
	if err != nil || !ok || !was.Active {
		t.Fatalf("resolve: %+v %v %v", was, ok, err)
	}
	if _, ok, _ := s.ResolveAlert(ctx, a.ID, t0.Add(2*time.Hour), nil); ok {
		t.Fatal("resolved twice")
	}
	if _, ok, _ := s.ResolveAlert(ctx, "never-fired", t0, nil); ok {
		t.Fatal("resolved an alert that never fired")
	}
	if ok, _ := s.FireAlert(ctx, a); ok {
		t.Fatal("fired again in the same period after resolving")
	}
	as, _ = s.Alerts(ctx)
	if len(as) != 1 || as[0].Active || !as[0].ResolvedAt.Equal(t0.Add(time.Hour)) || string(as[0].Doc) != `{"n":2}` {
		t.Fatalf("resolved, listed %+v", as)
	}
	next := a
	next.Period, next.FiredAt = "2026-04", t0.Add(31*24*time.Hour)
	if ok, err := s.FireAlert(ctx, next); !ok || err != nil {
		t.Fatalf("a later period: %v %v", ok, err)
	}
	other := configstore.Alert{ID: "use|budget:user_path:/a:month|0.8", Period: "2026-04", FiredAt: next.FiredAt.Add(time.Minute), Doc: json.RawMessage(`{}`)}
	if ok, _ := s.FireAlert(ctx, other); !ok {
		t.Fatal("another threshold did not fire")
	}
	if as, _ = s.Alerts(ctx); len(as) != 2 || as[0].ID != other.ID {
		t.Fatalf("newest first: %+v", as)
	}
}

// The audit trail pages newest first with a cursor, filters by subject,
// by subtree and by instant, and never lists an entry twice.
func auditSuite(t *testing.T, s store) {
	ctx := context.Background()
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 250 {
		at := t0.Add(time.Duration(i) * time.Second)
		path, target := "/partners/acme/shop", fmt.Sprintf("user_path:/partners/acme/shop%d:minute", i)
		if i%2 == 1 {
			path, target = "/teams/b", fmt.Sprintf("user_path:/teams/b%d:minute", i)
		}
		e := configstore.AuditEntry{ID: configstore.NewAuditID(at), At: at, Actor: "master", Action: "POST /admin/rate-limits",
			Target: target, UserPath: path, After: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if err := s.PutAudit(ctx, e, configstore.DefaultAuditRetention); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	cursor, pages := "", 0
	var last time.Time
	for {
		p, err := s.Audit(ctx, configstore.AuditQuery{Cursor: cursor, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range p.Entries {
			if seen[e.ID] {
				t.Fatalf("%s listed twice", e.ID)
			}
			if !last.IsZero() && e.At.After(last) {
				t.Fatalf("not newest first: %v after %v", e.At, last)
			}
			seen[e.ID], last = true, e.At
		}
		if p.Next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("the cursor does not end")
		}
		cursor = p.Next
	}
	if len(seen) != 250 || pages < 3 {
		t.Fatalf("%d entries in %d pages, want 250 in at least 3", len(seen), pages)
	}
	p, err := s.Audit(ctx, configstore.AuditQuery{Within: "/partners/acme"})
	if err != nil || len(p.Entries) != 100 || p.Next == "" {
		t.Fatalf("within a subtree: %d entries, next %q, %v", len(p.Entries), p.Next, err)
	}
	for _, e := range p.Entries {
		if e.UserPath != "/partners/acme/shop" {
			t.Fatalf("outside the subtree: %+v", e)
		}
	}
	p2, _ := s.Audit(ctx, configstore.AuditQuery{Within: "/partners/acme", Cursor: p.Next})
	if len(p2.Entries) != 25 || p2.Next != "" {
		t.Fatalf("the subtree's second page: %d entries, next %q", len(p2.Entries), p2.Next)
	}
	p, _ = s.Audit(ctx, configstore.AuditQuery{Subject: "user_path:/teams/b7:minute"})
	if len(p.Entries) != 1 || string(p.Entries[0].After) != `{"i":7}` || p.Entries[0].Actor != "master" {
		t.Fatalf("by target: %+v", p.Entries)
	}
	p, _ = s.Audit(ctx, configstore.AuditQuery{Since: t0.Add(240 * time.Second)})
	if len(p.Entries) != 10 || p.Next != "" {
		t.Fatalf("since: %d entries, next %q", len(p.Entries), p.Next)
	}
	if _, err := s.Audit(ctx, configstore.AuditQuery{Cursor: "nonsense"}); !errors.Is(err, configstore.ErrBadCursor) {
		t.Fatalf("a bad cursor: %v", err)
	}
}

// A migration's share moves by conditional writes: of two writers that
// read the same state one wins and the other is told the migration moved,
// whether it was never written or had been; each write moves the store's
// version; what two instances count of one interval adds up (apart from
// another interval's); the history keeps the last 20 steps.
func migrationSuite(t *testing.T, s store) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	read := func() configstore.MigrationState {
		t.Helper()
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Migrations["mini"]
	}
	v0, _ := s.Version(ctx)
	var zero configstore.MigrationState
	for _, from := range []configstore.MigrationState{zero, zero.Then(t0, 1000, "started")} {
		if from.V > 0 { // the second round: from as the first round left it
			from = read()
		}
		wins := 0
		for i, share := range []int64{from.Share + 4000, from.Share + 10} {
			next := from.Then(t0.Add(time.Duration(from.V)*time.Minute), share, fmt.Sprintf("writer %d", i))
			switch err := s.StepMigration(ctx, "mini", from, next); {
			case err == nil:
				wins++
			case !errors.Is(err, configstore.ErrMigrationMoved):
				t.Fatalf("writer %d from v%d: %v, want ErrMigrationMoved", i, from.V, err)
			}
		}
		got := read()
		if wins != 1 || got.V != from.V+1 || got.Share != from.Share+4000 || len(got.History) != int(from.V)+1 ||
			got.History[from.V].Why != "writer 0" || !got.At.Equal(t0.Add(time.Duration(from.V)*time.Minute)) {
			t.Fatalf("two writers from v%d: %d won, the store has %+v", from.V, wins, got)
		}
	}
	if v1, _ := s.Version(ctx); v1 == v0 {
		t.Fatal("stepping a migration did not move the store's version")
	}
	st := read()
	held := st.Then(t0.Add(time.Hour), st.Share, "paused: by master")
	held.Paused, held.RolledBack, held.Holding = true, true, "upstream_429_rate 0.08 above 0.02"
	if err := s.StepMigration(ctx, "mini", st, held); err != nil {
		t.Fatal(err)
	}
	if got := read(); !got.Paused || !got.RolledBack || got.Holding != held.Holding {
		t.Fatalf("a paused, rolled back, holding migration read back as %+v", got)
	}

	// Two instances' counts of one interval, and another interval's.
	a := configstore.MigrationCounts{Answers: 40, RateLimited: 2, Errors: 1}
	b := configstore.MigrationCounts{Answers: 60, RateLimited: 3}
	for i := range 40 {
		a.ToLatency.Add(20)
		b.FromLatency.Add(int64(5 + i%2))
	}
	for _, c := range []configstore.MigrationCounts{a, b} {
		if err := s.AddMigrationCounts(ctx, "mini", t0, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddMigrationCounts(ctx, "mini", t0.Add(5*time.Second), configstore.MigrationCounts{Answers: 7}); err != nil {
		t.Fatal(err)
	}
	c, err := s.MigrationCounts(ctx, "mini", t0)
	if err != nil || c.Answers != 100 || c.RateLimited != 5 || c.Errors != 1 || c.ToLatency.N() != 40 || c.FromLatency.N() != 40 ||
		c.ToLatency.Quantile(0.95) != 23 || c.FromLatency.Quantile(0.95) != 6 {
		t.Fatalf("two instances' counts added up to %+v (%v), want 100 answers, 5 429s, 1 error, 40 latencies each", c, err)
	}
	if c, _ := s.MigrationCounts(ctx, "mini", t0.Add(5*time.Second)); c.Answers != 7 {
		t.Fatalf("the next interval's counts: %+v", c)
	}
	if c, _ := s.MigrationCounts(ctx, "other", t0); c.Answers != 0 {
		t.Fatalf("another migration's counts: %+v", c)
	}

	// The history keeps the last 20 steps.
	for i := range 25 {
		st := read()
		if err := s.StepMigration(ctx, "mini", st, st.Then(t0.Add(2*time.Hour+time.Duration(i)*time.Minute), int64(i*100), fmt.Sprintf("step %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	got := read()
	if len(got.History) != 20 || got.History[0].Why != "step 5" || got.History[19].Why != "step 24" || got.Share != 2400 ||
		!got.History[19].At.Equal(t0.Add(2*time.Hour+24*time.Minute)) {
		t.Fatalf("after 28 writes the history is %d long, %+v … %+v", len(got.History), got.History[0], got.History[len(got.History)-1])
	}
}
