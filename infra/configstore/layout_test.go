package configstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/infra/memstore"
	"github.com/tollgate/tollgate/limiter"
)

// Two gateway instances on one store disagree on a rule's shards (a
// deploy under way: the newer one says 4, the older 1). The newer records
// the change; both count by the recorded layout from the same instant, the
// older does not put its own back, and together they never admit more than
// the limit in a window.
func TestInstancesAgreeOnShardLayout(t *testing.T) {
	ctx := context.Background()
	src := NewMemory()
	counters := memstore.New()
	t0 := time.Date(2026, 3, 2, 0, 0, 10, 0, time.UTC) // 10 s into a minute
	rule := limiter.Rule{Scope: limiter.ScopeProvider, Subject: "hot", Limit: limiter.Window{Period: time.Minute, MaxRequests: 100}, Source: limiter.SourceConfig}
	instance := func(shards int, started time.Time) (*Watcher, *limiter.Limiter) {
		r := rule
		r.Shards = shards
		l, _ := limiter.New(limiter.Config{Store: counters})
		w := NewWatcher(src, []limiter.Rule{r}, l, 0, nil)
		w.started = started
		w.RecordLayouts()
		return w, l
	}
	oldW, oldL := instance(1, t0.Add(-time.Hour))
	if err := oldW.refresh(ctx, t0); err != nil {
		t.Fatal(err)
	}
	seq := 0
	admitted := func(l *limiter.Limiter, at time.Time, n int) int {
		got := 0
		for range n {
			seq++
			d, err := l.Admit(ctx, at, limiter.Request{ID: fmt.Sprintf("r%d", seq), Subject: limiter.Subject{UserPath: "/", Provider: "hot", Model: "m"}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				got++
			}
		}
		return got
	}
	n := admitted(oldL, t0, 60)
	newW, newL := instance(4, t0)
	for _, w := range []*Watcher{newW, oldW, newW, oldW} {
		if err := w.refresh(ctx, t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []*limiter.Limiter{oldL, newL} {
		r, _ := l.Rules().Lookup(rule.Key())
		if len(r.ShardHistory) != 2 || r.ShardHistory[1].Shards != 4 || r.Shards != 4 {
			t.Fatalf("an instance counts by %+v, want the recorded change to 4", r)
		}
	}
	// In the window of the change both still count on one shard: the
	// window's limit holds across both instances.
	n += admitted(newL, t0.Add(5*time.Second), 60) + admitted(oldL, t0.Add(6*time.Second), 60)
	if n != 100 {
		t.Fatalf("%d admitted in the window of the change across both instances, want 100", n)
	}
	// The older instance refreshing again does not put its 1 back.
	if err := oldW.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if l := src.layouts[rule.Key()]; len(l.History) != 2 || l.History[1].Shards != 4 {
		t.Fatalf("record after the older instance's refresh: %+v", l)
	}
	// The next window: four shards, the previous window carried.
	next := t0.Add(50 * time.Second) // 0 s into the next minute
	if got := admitted(newL, next, 20) + admitted(oldL, next, 20); got != 0 {
		t.Fatalf("%d admitted at the start of the next window, want 0", got)
	}
}
