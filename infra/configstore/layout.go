package configstore

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Layouts. A sharded rule's shard layout is agreed through the store, so
// that every gateway instance counts a change of shards from the same
// instant (see limiter/layout.go): the first instance to find a rule whose
// configured shards differ from the recorded layout records the change,
// to count from far enough ahead that every instance has read it by then;
// until then, and whatever its own configuration says, every instance
// uses the recorded layout.

// Layout is a rule's recorded shard layouts.
type Layout struct {
	// History is the rule's recent layouts, oldest first; see
	// limiter.Rule.ShardHistory.
	History []limiter.ShardLayout
	// Generation is the generation of the rule's counters it applies to:
	// a reset starts from no history.
	Generation string
	// Writer is when the process that recorded the last change started:
	// of two configurations disagreeing on a rule's shards (a deploy under
	// way), the newer process's wins.
	Writer time.Time
	// Version counts the record's writes, for compare-and-swap.
	Version int64
}

// ErrLayoutChanged is SetLayout's answer when the record is no longer at
// the version given: another instance recorded a change first.
var ErrLayoutChanged = errors.New("layout changed meanwhile")

// Layouts is what a Source with recorded layouts can do.
type Layouts interface {
	// SetLayout records l for the rule with key k if its record is at
	// version (0: none yet), and bumps the store's version.
	SetLayout(ctx context.Context, k limiter.RuleKey, l Layout, version int64) error
}

// layouts applies the recorded layouts to the rules in force, and records
// the changes of the ones whose shards the configuration changed.
func (w *Watcher) layouts(ctx context.Context, rules []limiter.Rule, snap Snapshot, now time.Time) []limiter.Rule {
	rec, canRecord := w.src.(Layouts)
	canRecord = canRecord && w.record.Load()
	for i := range rules {
		r := &rules[i]
		want := max(r.Shards, 1)
		l, ok := snap.Layouts[r.Key()]
		if ok && l.Generation != r.Generation {
			ok = false // new counters: no history
		}
		inForce := 1
		if ok && len(l.History) > 0 {
			inForce = max(l.History[len(l.History)-1].Shards, 1)
		}
		if want != inForce && canRecord && (!ok || r.Source == limiter.SourceManual || w.started.After(l.Writer)) {
			hist := l.History
			if !ok || len(hist) == 0 {
				hist = []limiter.ShardLayout{{Shards: 1}}
			}
			probe := *r
			probe.ShardHistory = hist
			since := now.Add(w.interval + time.Second)
			if next := limiter.NextLayoutChange(probe, w.limiter.LeaseTTL()); next.After(since) {
				since = next
			}
			hist = append(hist[max(0, len(hist)-3):len(hist):len(hist)], limiter.ShardLayout{Shards: want, Since: since})
			err := rec.SetLayout(ctx, r.Key(), Layout{History: hist, Generation: r.Generation, Writer: w.started}, l.Version)
			switch {
			case err == nil:
				w.log.Info("shards of a rule changed; the new layout counts from the instant recorded for every instance",
					"rule", string(r.Key()), "from", inForce, "to", want, "counts_from", since)
			case !errors.Is(err, ErrLayoutChanged):
				w.log.Warn("could not record a rule's new shard layout; keeping the one in force", "rule", string(r.Key()), "err", err)
			}
		}
		// Whatever this instance's configuration says, the recorded layout
		// counts.
		r.Shards = inForce
		r.ShardHistory = nil
		if ok {
			r.ShardHistory = l.History
		}
	}
	return rules
}

// RecordLayouts lets this watcher record shard layout changes: for the
// gateway, whose admissions count by them; other functions only read them.
func (w *Watcher) RecordLayouts() { w.record.Store(true) }
